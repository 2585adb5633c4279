// What the bucket DASH tests share: a one-worker bucket under --optimizer dash holding a random
// matrix and a vector, and random gradient pushes for it. For tests only.
#pragma once

#include <random>
#include <vector>

#include "messages/types.hpp"

namespace troupe::testing {

// A rows x cols matrix "w" in block x block blocks and a 3-vector "b", random from `seed`.
inline bucket_spec dash_bucket_spec(uint32_t rows, uint32_t cols, uint32_t block, unsigned seed,
                                    root_solver solver = root_solver::coupled_newton) {
  bucket_spec spec{0, 1, optimizer_config{}, {}, {}, {}};
  spec.optimizer.type = optimizer_config::kind::dash;
  spec.optimizer.lr = 0.01f;
  spec.optimizer.dash_block = block;
  spec.optimizer.dash_freq = 2;
  spec.optimizer.dash_solver = solver;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  dense_tensor w{"w", {rows, cols}, 0, std::vector<float>(size_t{rows} * cols)};
  dense_tensor b{"b", {3}, 0, std::vector<float>(3)};
  for (auto& x : w.values) x = normal(rng);
  for (auto& x : b.values) x = normal(rng);
  spec.tensors = {w, b};
  return spec;
}

// Worker 0's push at `clock`: a random gradient for every tensor of `spec`.
inline push_request push_at(const bucket_spec& spec, uint64_t clock, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  push_request push{spec.bucket, 0, clock, vector_clock{std::vector<uint64_t>{clock}}};
  for (const auto& t : spec.tensors) {
    dense_tensor g = t;
    for (auto& x : g.values) x = normal(rng);
    push.dense.push_back(std::move(g));
  }
  return push;
}

}  // namespace troupe::testing
