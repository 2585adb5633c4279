// How a bucket runs an app's update rule (troupe/update_rule.hpp) on one dense slice or one
// embedding row, and how many moments each optimizer keeps. Used by bucket_store and
// sparse_table; not thread-safe (the caller's actor owns the values).
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "troupe/update_rule.hpp"

namespace troupe {

// Per-value state buffers `o` keeps: sgd 0, momentum 1, adam / adamw / dash 2, an app rule
// its own count (0 when this process lacks the rule).
unsigned moments_of(const optimizer_config& o, const std::optional<update_rule>& rule);

// Runs `rule` on theta, m and v in place; false when a value came out non-finite, or when
// there is no rule. The caller undoes a refused push whole (bucket_store's rule_undo).
bool step_app_rule(const std::optional<update_rule>& rule, const optimizer_config& o,
                   std::span<float> theta, std::span<float> m, std::span<float> v,
                   std::span<const float> grad, uint64_t step, float lr);

}  // namespace troupe
