// Device memory (or pinned host memory, for asynchronous copies) handed out in fixed-size
// pages: a request is rounded up to whole pages, and a
// released run of pages is kept for the next request of the same page count, so a training
// loop that allocates the same shapes every step reaches a steady state without cudaMalloc or
// cudaFree (both synchronise the device). Bounded: requests beyond `capacity_bytes` reserved
// in total fail with errc::device_failure. Owned by one gpu_stream actor; not thread-safe.
#pragma once

#include <caf/expected.hpp>

#include <cstddef>
#include <map>
#include <unordered_map>
#include <vector>

namespace troupe {

class device_pool {
 public:
  enum class memory { device, pinned_host };

  device_pool(size_t page_bytes, size_t capacity_bytes, memory kind = memory::device);
  ~device_pool();
  device_pool(const device_pool&) = delete;
  device_pool& operator=(const device_pool&) = delete;

  // Memory for at least `bytes` (whole pages), on the current device (or pinned on the host).
  caf::expected<void*> acquire(size_t bytes);
  // Gives back what acquire returned; the pages wait for the next request of their size.
  void release(void* ptr);

  size_t page_bytes() const { return page_bytes_; }
  size_t reserved_bytes() const { return reserved_pages_ * page_bytes_; }
  size_t in_use_bytes() const;

 private:
  caf::expected<void*> allocate(size_t bytes);  // cudaMalloc, or cudaHostAlloc when pinned
  void free(void* p);

  size_t page_bytes_;
  size_t capacity_pages_;
  memory kind_;
  size_t reserved_pages_ = 0;
  std::map<size_t, std::vector<void*>> free_;  // page count -> released runs
  std::unordered_map<void*, size_t> used_;     // run -> page count
};

}  // namespace troupe
