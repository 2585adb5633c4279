#include "actors/gpu/device_pool.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

device_pool::device_pool(size_t page_bytes, size_t capacity_bytes, memory kind)
    : page_bytes_(page_bytes ? page_bytes : 1),
      capacity_pages_(capacity_bytes / page_bytes_),
      kind_(kind) {}

device_pool::~device_pool() {
  for (auto& [pages, runs] : free_)
    for (void* p : runs) free(p);
  for (auto& [p, pages] : used_) free(p);
}

caf::expected<void*> device_pool::allocate(size_t bytes) {
  void* p = nullptr;
  const bool device = kind_ == memory::device;
  const cudaError_t err =
      device ? cudaMalloc(&p, bytes) : cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return make_error(errc::device_failure,
                      fmt::format("{} of {} bytes: {}", device ? "cudaMalloc" : "cudaHostAlloc",
                                  bytes, cudaGetErrorString(err)));
  }
  return p;
}

void device_pool::free(void* p) {
  if (kind_ == memory::device)
    cudaFree(p);
  else
    cudaFreeHost(p);
}

caf::expected<void*> device_pool::acquire(size_t bytes) {
  const size_t pages = std::max<size_t>(1, (bytes + page_bytes_ - 1) / page_bytes_);
  if (auto it = free_.find(pages); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    used_.emplace(p, pages);
    return p;
  }
  if (reserved_pages_ + pages > capacity_pages_) {
    // Give the cached runs back before refusing: another size may fit after that.
    for (auto& [count, runs] : free_)
      for (void* p : runs) {
        free(p);
        reserved_pages_ -= count;
      }
    free_.clear();
    if (reserved_pages_ + pages > capacity_pages_)
      return make_error(errc::device_failure,
                        fmt::format("device pool: {} more pages would pass its {} pages", pages,
                                    capacity_pages_));
  }
  // Device memory, or pinned host memory for the staging pool (host code writes into it).
  auto p = allocate(pages * page_bytes_);
  if (!p) return p;
  reserved_pages_ += pages;
  used_.emplace(*p, pages);
  return p;
}

void device_pool::release(void* ptr) {
  auto it = used_.find(ptr);
  if (it == used_.end()) return;
  free_[it->second].push_back(ptr);
  used_.erase(it);
}

size_t device_pool::in_use_bytes() const {
  size_t pages = 0;
  for (const auto& [p, count] : used_) pages += count;
  return pages * page_bytes_;
}

}  // namespace troupe
