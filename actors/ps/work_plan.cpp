#include "actors/ps/work_plan.hpp"

#include <algorithm>

namespace troupe {

work_plan::work_plan(uint32_t epochs, uint64_t batches_per_epoch, uint32_t chunk, uint32_t workers)
    : epochs_(epochs),
      per_epoch_(batches_per_epoch),
      chunk_(std::max<uint32_t>(chunk, 1)),
      held_(workers),
      finished_(epochs, 0) {
  if (per_epoch_ == 0) next_epoch_ = epochs_;
}

work_chunk work_plan::claim(uint32_t worker) {
  if (worker >= held_.size()) return {};
  work_chunk out;
  if (!returned_.empty()) {
    out = returned_.front();
    returned_.pop_front();
  } else if (next_epoch_ < epochs_) {
    const auto count = static_cast<uint32_t>(std::min<uint64_t>(chunk_, per_epoch_ - next_batch_));
    out = work_chunk{next_epoch_, next_batch_, count};
    next_batch_ += count;
    if (next_batch_ == per_epoch_) {
      ++next_epoch_;
      next_batch_ = 0;
    }
  } else {
    return {};
  }
  held_[worker].push_back(out);
  return out;
}

work_lease work_plan::claim_lease(uint32_t worker, uint32_t most) {
  const uint64_t workers = std::max<size_t>(held_.size(), 1);
  const uint64_t share = unclaimed_chunks() / (2 * workers);
  const uint64_t n = std::clamp<uint64_t>(share, 1, std::max<uint32_t>(most, 1));
  work_lease lease;
  for (uint64_t i = 0; i < n; ++i) {
    const auto c = claim(worker);
    if (c.count == 0) break;
    lease.chunks.push_back(c);
  }
  return lease;
}

uint64_t work_plan::unclaimed_chunks() const {
  uint64_t chunks = returned_.size();
  if (next_epoch_ < epochs_) {
    const uint64_t epoch_chunks = (per_epoch_ + chunk_ - 1) / chunk_;
    const uint64_t this_epoch = (per_epoch_ - next_batch_ + chunk_ - 1) / chunk_;
    chunks += this_epoch + (epochs_ - next_epoch_ - 1) * epoch_chunks;
  }
  return chunks;
}

bool work_plan::finish(uint32_t worker, const work_chunk& chunk) {
  if (worker >= held_.size() || chunk.count == 0) return false;
  auto& held = held_[worker];
  const auto it = std::find(held.begin(), held.end(), chunk);
  if (it == held.end()) return false;
  held.erase(it);
  finished_[chunk.epoch] += chunk.count;
  return true;
}

uint64_t work_plan::release(uint32_t worker) {
  if (worker >= held_.size()) return 0;
  uint64_t batches = 0;
  for (auto it = held_[worker].rbegin(); it != held_[worker].rend(); ++it) {
    returned_.push_front(*it);
    batches += it->count;
  }
  held_[worker].clear();
  return batches;
}

uint64_t work_plan::abandon_returned() {
  uint64_t batches = 0;
  for (const auto& c : returned_) {
    finished_[c.epoch] += c.count;
    batches += c.count;
  }
  returned_.clear();
  return batches;
}

void work_plan::save(job_checkpoint& out) const {
  out.epochs = epochs_;
  out.batches_per_epoch = per_epoch_;
  out.chunk = chunk_;
  out.next_epoch = next_epoch_;
  out.next_batch = next_batch_;
  out.finished = finished_;
  out.pending.assign(returned_.begin(), returned_.end());
  for (const auto& held : held_) out.pending.insert(out.pending.end(), held.begin(), held.end());
  out.step = finished_batches();
}

work_plan work_plan::restore(const job_checkpoint& saved, uint32_t workers) {
  work_plan plan{saved.epochs, saved.batches_per_epoch, saved.chunk, workers};
  plan.next_epoch_ = saved.next_epoch;
  plan.next_batch_ = saved.next_batch;
  plan.finished_ = saved.finished;
  plan.returned_.assign(saved.pending.begin(), saved.pending.end());
  return plan;
}

bool work_plan::take(const work_chunk& c) {
  if (c.epoch >= epochs_ || c.count == 0 || c.first + c.count > per_epoch_) return false;
  if (auto it = std::find(returned_.begin(), returned_.end(), c); it != returned_.end()) {
    returned_.erase(it);
    return true;
  }
  const auto before_next = [&] {
    return c.epoch < next_epoch_ || (c.epoch == next_epoch_ && c.first < next_batch_);
  };
  if (next_epoch_ >= epochs_ || before_next()) return false;
  // Walks the chunks not yet handed out up to c; they were handed out after the old state.
  std::vector<work_chunk> skipped;
  const uint32_t was_epoch = next_epoch_;
  const uint64_t was_batch = next_batch_;
  while (next_epoch_ < epochs_ && !before_next()) {
    const auto count = static_cast<uint32_t>(std::min<uint64_t>(chunk_, per_epoch_ - next_batch_));
    const work_chunk next{next_epoch_, next_batch_, count};
    next_batch_ += count;
    if (next_batch_ == per_epoch_) {
      ++next_epoch_;
      next_batch_ = 0;
    }
    if (next == c) {
      returned_.insert(returned_.end(), skipped.begin(), skipped.end());
      return true;
    }
    skipped.push_back(next);
  }
  next_epoch_ = was_epoch;  // c is not a chunk of this plan: nothing is handed out
  next_batch_ = was_batch;
  return false;
}

std::vector<size_t> work_plan::adopt(uint32_t worker, const std::vector<work_chunk>& held,
                                     const std::vector<work_chunk>& finished) {
  std::vector<size_t> counted;
  if (worker >= held_.size()) return counted;
  for (const auto& c : held)
    if (take(c)) held_[worker].push_back(c);
  for (size_t i = 0; i < finished.size(); ++i)
    if (take(finished[i])) {
      finished_[finished[i].epoch] += finished[i].count;
      counted.push_back(i);
    }
  return counted;
}

uint64_t work_plan::finished_batches() const {
  uint64_t total = 0;
  for (uint64_t f : finished_) total += f;
  return total;
}

bool work_plan::epoch_complete(uint32_t epoch) const {
  return epoch < epochs_ && finished_[epoch] >= per_epoch_;
}

}  // namespace troupe
