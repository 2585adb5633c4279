// One step of an element-wise optimizer (sgd, momentum, adam, adamw, and DiLoCo's outer
// nesterov and delayed_nesterov) on a run of values and
// their moments, for every store that steps such runs: the bucket_store's slices and a dp
// member's pieces of sharded state (actors/dp/trainer/dp_trainer_shards.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/adam_hyper.hpp"
#include "troupe/values.hpp"

namespace troupe {

// Whether `o` steps each value on its own (all but dash and app), as step_elementwise
// does; dash and an app's rule step whole slices.
bool elementwise(const optimizer_config& o);

// Adam's hyper-parameters for update number `t` (1-based: the bias correction) at rate `lr`:
// adamw's weight decay decoupled, adam's an L2 term of the gradient.
kernels::adam_hyper adam_hyper_of(const optimizer_config& o, float lr, uint64_t t);

// Steps `theta` by `grad`, update number `t` (1-based): sgd takes no moment, momentum and
// nesterov `m`, adam and adamw `m` and `v`, delayed_nesterov `m` and its buffer in `v` (the
// spans the optimizer does not use may be empty). False for an optimizer that does not step
// each value on its own (dash, an app's rule): nothing is changed.
bool step_elementwise(const optimizer_config& o, float lr, uint64_t t, std::span<float> theta,
                      std::span<float> m, std::span<float> v, std::span<const float> grad);

}  // namespace troupe
