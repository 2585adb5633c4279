// The consistency rule of one bucket, as a pure function of its vector clock: a worker whose
// clock is c may read once c <= (slowest live worker's applied count) + bound. async has no
// bound, ssp:S has bound S, bsp has bound 0 (and the bucket averages each round's pushes).
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
  bool retired(uint32_t worker) const { return worker < retired_.size() && retired_[worker]; }
  uint32_t live() const;

 private:
  // The smallest applied count of a live worker; nullopt when every worker has retired.
  std::optional<uint64_t> slowest(const vector_clock& applied) const;

  consistency_config config_;
  std::vector<bool> retired_;
};

}  // namespace troupe
