#include "apps/ctr/ctr_tower.hpp"

#include <cmath>
#include <string>

#include "troupe/random.hpp"

namespace troupe::ctr {

namespace {

// Layer l: in(l) inputs, out(l) outputs.
uint32_t in_of(const tower_shape& s, size_t l) {
  return l == 0 ? s.input : s.hidden[l - 1];
}
uint32_t out_of(const tower_shape& s, size_t l) {
  return l < s.hidden.size() ? s.hidden[l] : 1;
}
size_t layers_of(const tower_shape& s) {
  return s.empty() ? 0 : s.hidden.size() + 1;
}

}  // namespace

std::vector<tensor_spec> tower_tensors(const tower_shape& s) {
  std::vector<tensor_spec> out;
  for (size_t l = 0; l < layers_of(s); ++l) {
    const std::string name = "tower." + std::to_string(l);
    out.push_back({name + ".w", {out_of(s, l), in_of(s, l)}});
    out.push_back({name + ".b", {out_of(s, l)}});
  }
  return out;
}

size_t tower_values(const tower_shape& s) {
  size_t n = 0;
  for (size_t l = 0; l < layers_of(s); ++l) n += size_t{out_of(s, l)} * (in_of(s, l) + 1);
  return n;
}

void init_tower(const tower_shape& s, uint64_t seed, std::span<float> params) {
  size_t at = 0;
  for (size_t l = 0; l < layers_of(s); ++l) {
    const uint32_t in = in_of(s, l), out = out_of(s, l);
    const double limit = std::sqrt(6.0 / double(in + out));
    for (size_t k = 0; k < size_t{in} * out; ++k) {
      const uint64_t h = splitmix64(seed ^ splitmix64(uint64_t{l} << 40 | k));
      params[at++] = static_cast<float>(limit * (2.0 * double(h >> 11) / double(1ull << 53) - 1));
    }
    for (uint32_t k = 0; k < out; ++k) params[at++] = 0.0f;
  }
}

double tower_forward(const tower_shape& s, std::span<const float> params,
                     std::span<const float> input, tower_activations& acts) {
  acts.layers.resize(layers_of(s));
  size_t at = 0;
  std::span<const float> x = input;
  for (size_t l = 0; l < layers_of(s); ++l) {
    const uint32_t in = in_of(s, l), out = out_of(s, l);
    const float* w = params.data() + at;
    const float* b = w + size_t{in} * out;
    auto& y = acts.layers[l];
    y.assign(out, 0.0f);
    const bool last = l + 1 == layers_of(s);
    for (uint32_t o = 0; o < out; ++o) {
      float sum = b[o];
      for (uint32_t i = 0; i < in; ++i) sum += w[size_t{o} * in + i] * x[i];
      y[o] = last || sum > 0 ? sum : 0.0f;
    }
    at += size_t{out} * (in + 1);
    x = y;
  }
  return acts.layers.empty() ? 0.0 : acts.layers.back()[0];
}

void tower_backward(const tower_shape& s, std::span<const float> params,
                    std::span<const float> input, const tower_activations& acts, double dout,
                    std::span<float> dparams, std::span<float> dinput) {
  const size_t layers = layers_of(s);
  if (layers == 0) return;
  std::vector<size_t> offsets(layers, 0);
  for (size_t l = 1; l < layers; ++l)
    offsets[l] = offsets[l - 1] + size_t{out_of(s, l - 1)} * (in_of(s, l - 1) + 1);
  std::vector<float> delta{static_cast<float>(dout)}, below;  // d(out)/d(layer l's pre-activation)
  for (size_t l = layers; l-- > 0;) {
    const uint32_t in = in_of(s, l), out = out_of(s, l);
    const std::span<const float> x = l == 0 ? input : std::span<const float>(acts.layers[l - 1]);
    const float* w = params.data() + offsets[l];
    float* dw = dparams.data() + offsets[l];
    float* db = dw + size_t{in} * out;
    below.assign(in, 0.0f);
    for (uint32_t o = 0; o < out; ++o) {
      const float d = delta[o];
      if (d == 0.0f) continue;
      db[o] += d;
      for (uint32_t i = 0; i < in; ++i) {
        dw[size_t{o} * in + i] += d * x[i];
        below[i] += d * w[size_t{o} * in + i];
      }
    }
    if (l == 0) {
      for (uint32_t i = 0; i < in; ++i) dinput[i] += below[i];
    } else {  // through the ReLU of layer l - 1
      for (uint32_t i = 0; i < in; ++i) below[i] = acts.layers[l - 1][i] > 0 ? below[i] : 0.0f;
    }
    delta.swap(below);
  }
}

}  // namespace troupe::ctr
