// bucket_buffers: the few bucket-sized buffers a dp member under --zero-stage 2 puts its
// gradient in, tensor by tensor as backward finishes them, instead of one buffer of the whole
// model's size. A bucket takes a buffer when its first tensor comes (take), hands it to its
// reduce order once full (sent), and the buffer comes back when the order is done with it (the
// lease is dropped, on the group's thread). For the dp_trainer only; thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

class bucket_buffers {
 public:
  // A buffer lent to one bucket; it goes back to its pool when the last holder drops it.
  class lease {
   public:
    lease(std::shared_ptr<bucket_buffers> pool, std::vector<float> values)
        : pool_(std::move(pool)), values_(std::move(values)) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease();
    std::span<float> values(size_t n) { return std::span<float>(values_).first(n); }

   private:
    friend class bucket_buffers;
    std::shared_ptr<bucket_buffers> pool_;
    std::vector<float> values_;
    bool sent_ = false;
  };

  // Buffers of `capacity` values each (the largest bucket); at most `most` are lent at once,
  // unless none lent is sent (then one more is made, so that a task that finishes its tensors
  // out of bucket order never waits on itself).
  static std::shared_ptr<bucket_buffers> make(size_t capacity, size_t most);

  // A buffer for a bucket being filled, waiting at most `bound` for a sent one to come back
  // (errc::collective_failed past it).
  caf::expected<std::shared_ptr<lease>> take(std::chrono::milliseconds bound);
  // The bucket of `l` is full: its order may be waited for.
  void sent(lease& l);

 private:
  bucket_buffers(size_t capacity, size_t most) : capacity_(capacity), most_(most) {}
  void give_back(lease& l);

  std::weak_ptr<bucket_buffers> self_;
  const size_t capacity_;
  const size_t most_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::vector<float>> free_;
  size_t filling_ = 0, in_flight_ = 0;
};

}  // namespace troupe
