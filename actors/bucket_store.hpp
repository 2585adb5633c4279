// The state of one parameter bucket without the actor around it: its slices, optimizer state,
// vector clock and counters. apply() validates a push against the slices this bucket owns
// before touching anything, so a rejected push leaves the parameters exactly as they were.
// Owned by one parameter_bucket actor (or a test); not thread-safe.
#pragma once

#include <caf/expected.hpp>

#include "messages/types.hpp"

namespace troupe {

// Gradient values beyond this are refused like NaN/Inf: no single step of Adam or momentum SGD
// can then overflow fp32 and leave non-finite parameters behind.
constexpr float max_abs_gradient = 1e15f;

class bucket_store {
 public:
  // Takes the slices and their initial values from `spec`.
  explicit bucket_store(bucket_spec spec);

  uint32_t id() const { return id_; }

  // Applies one gradient push; errc::unknown_bucket, shape_mismatch, malformed_message or
  // non_finite (|g| > max_abs_gradient) on a push that does not fit (counted as rejected).
  caf::expected<push_ack> apply(const push_request& push);

  // Counts a push that failed before it could be decoded.
  void count_rejected() { ++rejected_; }

  pull_reply snapshot() const;
  bucket_stats stats() const;
  const std::vector<dense_tensor>& slices() const { return slices_; }

 private:
  caf::error validate(const push_request& push) const;
  void step(size_t slice, const std::vector<float>& grad);

  uint32_t id_;
  uint32_t workers_;
  optimizer_config optimizer_;
  std::vector<dense_tensor> slices_;
  std::vector<std::vector<float>> first_moment_;   // Adam m, or SGD velocity
  std::vector<std::vector<float>> second_moment_;  // Adam v; empty for SGD
  vector_clock clock_;
  uint64_t version_ = 0;
  uint64_t rejected_ = 0;
  uint64_t max_staleness_ = 0;
  uint64_t staleness_sum_ = 0;
};

}  // namespace troupe
