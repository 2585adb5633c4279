// The ctr model's dense tower (--tower 64,32): the embeddings of an example's fields (its rows
// of table v, concatenated) through a small ReLU MLP to one output added to the logit, as in
// DeepFM (Guo et al. 2017) and Wide & Deep (Cheng et al. 2016). Its weights are the model's
// dense parameters, "tower.L.w" [out, in] and "tower.L.b" [out] per layer L; the last layer
// has one output and no ReLU. Plain functions over caller-owned buffers; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "troupe/task.hpp"

namespace troupe::ctr {

struct tower_shape {
  uint32_t input = 0;            // fields x embedding dimension
  std::vector<uint32_t> hidden;  // widths of the hidden layers; empty: no tower
  bool empty() const { return hidden.empty(); }
};

// The tower's tensors, in the order the flat parameters hold them, and their value count.
std::vector<tensor_spec> tower_tensors(const tower_shape& s);
size_t tower_values(const tower_shape& s);

// Glorot-uniform weights from `seed`, zero biases, into `params` (tower_values(s) values).
void init_tower(const tower_shape& s, uint64_t seed, std::span<float> params);

// Each layer's outputs of the last forward pass (after ReLU; the last layer's is the output).
struct tower_activations {
  std::vector<std::vector<float>> layers;
};

// The tower's output for `input` (s.input values).
double tower_forward(const tower_shape& s, std::span<const float> params,
                     std::span<const float> input, tower_activations& acts);

// Adds d(out)/d(params) * dout to `dparams` and d(out)/d(input) * dout to `dinput`, for the
// input and activations of the last tower_forward.
void tower_backward(const tower_shape& s, std::span<const float> params,
                    std::span<const float> input, const tower_activations& acts, double dout,
                    std::span<float> dparams, std::span<float> dinput);

}  // namespace troupe::ctr
