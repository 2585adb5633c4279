// local_rounds: a worker's side of --mode diloco (DiLoCo, Douillard et al. 2023; streaming
// fragments, Douillard et al. 2025). Each chunk the worker claims is a round: every batch is a
// local step of the inner optimizer on the worker's own values; the buckets are cut into
// `fragments` groups, and group k (1..F) syncs after local step ceil(k x count / F): its
// pseudo-gradient (the values it last synced from, minus the worker's) is pushed at once, while
// the next local steps run, and its pull brings the global values back into `start`. Once the
// round's pulls are in, each fragment's values become the global ones plus what the local steps
// after its sync moved them (merge), so no local step is lost and each is pushed once.
//
// The inner optimizer's state stays here: a worker that joins, or restarts, starts it from
// zero, at the values its first pull brings. Pure state functions; the worker actor (worker.cpp,
// worker_requests.cpp) calls them.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "messages/types.hpp"
#include "troupe/detail/layout.hpp"

namespace troupe {

struct round_state {
  local_rounds config;
  // The global values each bucket last synced from: where its pulls land, and what a local
  // step's values are measured against at its sync.
  std::vector<float> start;
  std::vector<float> m, v;      // the inner optimizer's moments (as its kind needs)
  std::vector<float> at_sync;   // F > 1: each fragment's values at its sync this round
  std::vector<float> residual;  // int8: what rounding earlier pushes lost (error feedback)
  uint64_t inner_steps = 0;     // the inner optimizer's updates (Adam's bias correction)
  std::vector<std::pair<uint32_t, uint32_t>> fragments;  // each fragment's buckets [first, end)
  uint32_t next_fragment = 0;                            // the next fragment to sync in this round
  std::vector<uint32_t> skipped;  // this round's steps whose loss or gradient was not finite
  uint64_t pushed_bytes = 0;      // pseudo-gradient bytes this round's pushes carry

  // For `values` parameters in `buckets` buckets.
  round_state(local_rounds config, uint64_t values, uint32_t buckets);
};

// The buckets of each of `fragments` groups: contiguous, as even as the count allows.
std::vector<std::pair<uint32_t, uint32_t>> fragment_buckets(uint32_t buckets, uint32_t fragments);

// After which local step (1-based) of a round of `count` steps fragment k (0-based) of F syncs.
uint32_t sync_step(uint32_t k, uint32_t fragments, uint32_t count);

// One local step of the inner optimizer on `params` by `grad`.
void inner_step(round_state& r, std::span<float> params, std::span<const float> grad);

// Fragment `k`'s sync: its pseudo-gradient into `grad`, rounded as it will travel (so that a
// worker in the buckets' process applies the same; int8 keeps what rounding lost for the next
// push) and, with several fragments, its values kept in at_sync. Returns
// the bytes its pushes will carry.
uint64_t take_pseudo_gradient(round_state& r, const flat_layout& layout, const placement& plan,
                              uint32_t k, std::span<const float> params, std::span<float> grad);

// Once every pull of the round is in: each bucket's values become the global ones it pulled
// into `start`, plus what local steps moved them since its sync (nothing with one fragment).
void merge_pulled(round_state& r, const flat_layout& layout, const placement& plan,
                  std::span<float> params);

// The wire storage of the round's pushes.
dtype push_storage(const round_state& r);

}  // namespace troupe
