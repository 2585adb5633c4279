// The consistency rule of one bucket, as a pure function of its vector clock: a worker whose
// clock is c may read once c <= (slowest live worker's clock) + bound, where a worker's clock
// is the count of its pushes applied plus the clock it started at (late joiners start late). async
// has no bound, ssp:S has bound S, bsp has bound 0 (and the bucket averages each round's pushes).
// Workers retire (finish or are lost) and then hold nobody back. Owned by a bucket_store.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "messages/types.hpp"
#include "troupe/vector_clock.hpp"

namespace troupe {

class clock_gate {
 public:
  clock_gate(consistency_config config, uint32_t workers)
      : config_(config), retired_(workers, false) {}

  consistency_config::mode mode() const { return config_.type; }

  // Whether a worker that has pushed `clock` times may read now, given what `applied` counts.
  bool allows(uint64_t clock, const vector_clock& applied) const;

  // How far `clock` is ahead of the slowest live worker (0 when it is not ahead).
  uint64_t gap(uint64_t clock, const vector_clock& applied) const;

  void retire(uint32_t worker);

  // Room for one more worker, live, whose clock starts at `start` rather than 0 (a worker that
  // joins a running job); returns its rank.
  uint32_t add(uint64_t start) {
    retired_.push_back(false);
    start_.resize(retired_.size(), 0);
    start_.back() = start;
    return static_cast<uint32_t>(retired_.size() - 1);
  }

  // Counts a step of worker w that applied nothing (skipped or refused), so that its clock
  // stays in step with the worker's own.
  void skip(uint32_t w) {
    if (w >= start_.size()) start_.resize(w + 1, 0);
    ++start_[w];
  }

  // Worker w's clock: its applied count plus the clock it started at (and skipped steps).
  uint64_t clock_of(uint32_t w, const vector_clock& applied) const {
    return applied.at(w) + (w < start_.size() ? start_[w] : 0);
  }

  // The smallest clock (applied count plus starting clock) of a live worker; nullopt when
  // every worker has retired.
  std::optional<uint64_t> slowest(const vector_clock& applied) const;
  bool retired(uint32_t worker) const { return worker < retired_.size() && retired_[worker]; }

  // A worker of a resumed job takes rank w again: live, and its clock moved up to `clock` (the
  // slowest live worker's) when it was behind.
  void rejoin(uint32_t w, uint64_t clock, const vector_clock& applied) {
    if (w >= retired_.size()) return;
    retired_[w] = false;
    if (start_.size() <= w) start_.resize(w + 1, 0);
    if (const uint64_t now = clock_of(w, applied); now < clock) start_[w] += clock - now;
  }

  // Saved state (checkpoints, backups).
  const std::vector<bool>& retired_flags() const { return retired_; }
  const std::vector<uint64_t>& starts() const { return start_; }
  void restore(std::vector<bool> retired, std::vector<uint64_t> start) {
    retired_ = std::move(retired);
    start_ = std::move(start);
  }
  uint32_t live() const;

 private:
  consistency_config config_;
  std::vector<bool> retired_;
  std::vector<uint64_t> start_;  // per worker: the clock it started at (0 unless it joined late)
};

}  // namespace troupe
