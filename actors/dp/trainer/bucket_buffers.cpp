#include "actors/dp/trainer/bucket_buffers.hpp"

#include "troupe/error.hpp"

namespace troupe {

std::shared_ptr<bucket_buffers> bucket_buffers::make(size_t capacity, size_t most) {
  std::shared_ptr<bucket_buffers> pool(new bucket_buffers(capacity, most));
  pool->self_ = pool;
  return pool;
}

bucket_buffers::lease::~lease() {
  pool_->give_back(*this);
}

caf::expected<std::shared_ptr<bucket_buffers::lease>> bucket_buffers::take(
    std::chrono::milliseconds bound) {
  std::unique_lock lock(mutex_);
  const bool come_back = returned_.wait_for(lock, bound, [&] {
    return !free_.empty() || filling_ + in_flight_ < most_ || in_flight_ == 0;
  });
  if (!come_back)
    return make_error(errc::collective_failed,
                      "no bucket buffer came back from the group within its bound");
  std::vector<float> values;
  if (!free_.empty()) {
    values = std::move(free_.back());
    free_.pop_back();
  } else {
    values.assign(capacity_, 0.0f);
  }
  ++filling_;
  lock.unlock();
  return std::make_shared<lease>(self_.lock(), std::move(values));
}

void bucket_buffers::sent(lease& l) {
  std::lock_guard lock(mutex_);
  if (l.sent_) return;
  l.sent_ = true;
  --filling_;
  ++in_flight_;
}

void bucket_buffers::give_back(lease& l) {
  {
    std::lock_guard lock(mutex_);
    --(l.sent_ ? in_flight_ : filling_);
    if (free_.size() < most_) free_.push_back(std::move(l.values_));
  }
  returned_.notify_all();
}

}  // namespace troupe
