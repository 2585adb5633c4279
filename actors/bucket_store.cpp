#include "actors/bucket_store.hpp"

#include <fmt/format.h>

#include <cmath>

#include "kernels/cpu/optimizers.hpp"
#include "troupe/error.hpp"

namespace troupe {

bucket_store::bucket_store(bucket_spec spec)
    : id_(spec.bucket),
      workers_(spec.workers),
      optimizer_(spec.optimizer),
      slices_(std::move(spec.tensors)),
      clock_(spec.workers) {
  const bool adam = optimizer_.type == optimizer_config::kind::adam;
  for (const auto& s : slices_) {
    first_moment_.emplace_back(s.values.size(), 0.0f);
    second_moment_.emplace_back(adam ? s.values.size() : 0, 0.0f);
  }
}

caf::error bucket_store::validate(const push_request& push) const {
  if (push.bucket != id_)
    return make_error(errc::unknown_bucket,
                      fmt::format("bucket {} got a push for bucket {}", id_, push.bucket));
  if (push.worker >= workers_)
    return make_error(errc::malformed_message,
                      fmt::format("bucket {}: worker {} of {}", id_, push.worker, workers_));
  if (push.read_clock.size() > workers_)
    return make_error(errc::malformed_message,
                      fmt::format("bucket {}: read clock has {} entries for {} workers", id_,
                                  push.read_clock.size(), workers_));
  if (!push.sparse.empty() || !push.signs.empty())
    return make_error(errc::shape_mismatch, fmt::format("bucket {} holds dense tensors only", id_));
  if (push.dense.size() != slices_.size())
    return make_error(errc::shape_mismatch, fmt::format("bucket {} holds {} slices, push has {}",
                                                        id_, slices_.size(), push.dense.size()));
  for (size_t i = 0; i < slices_.size(); ++i) {
    const auto& mine = slices_[i];
    const auto& theirs = push.dense[i];
    for (float g : theirs.values)
      if (!(std::abs(g) <= max_abs_gradient))
        return make_error(errc::non_finite,
                          fmt::format("bucket {}: a gradient value of {} in {} (limit {:g})", id_,
                                      g, theirs.name, max_abs_gradient));
    if (mine.name != theirs.name || mine.row_offset != theirs.row_offset ||
        mine.shape != theirs.shape || mine.values.size() != theirs.values.size())
      return make_error(errc::shape_mismatch,
                        fmt::format("bucket {} slice {}: expects {} from row {} ({} values), "
                                    "got {} from row {} ({} values)",
                                    id_, i, mine.name, mine.row_offset, mine.values.size(),
                                    theirs.name, theirs.row_offset, theirs.values.size()));
  }
  return {};
}

void bucket_store::step(size_t slice, const std::vector<float>& grad) {
  auto& theta = slices_[slice].values;
  if (optimizer_.type == optimizer_config::kind::adam) {
    kernels::adam_hyper h{optimizer_.lr,      optimizer_.beta1,        optimizer_.beta2,
                          optimizer_.epsilon, optimizer_.weight_decay, version_ + 1};
    kernels::adam_step(theta, first_moment_[slice], second_moment_[slice], grad, h);
  } else {
    kernels::sgd_momentum_step(theta, first_moment_[slice], grad, optimizer_.lr, optimizer_.beta1,
                               optimizer_.weight_decay);
  }
}

caf::expected<push_ack> bucket_store::apply(const push_request& push) {
  if (auto err = validate(push)) {
    ++rejected_;
    return err;
  }
  const uint64_t staleness = clock_.staleness_since(push.read_clock);
  for (size_t i = 0; i < slices_.size(); ++i) step(i, push.dense[i].values);
  clock_.tick(push.worker);
  ++version_;
  max_staleness_ = std::max(max_staleness_, staleness);
  staleness_sum_ += staleness;
  return push_ack{id_, version_, staleness};
}

pull_reply bucket_store::snapshot() const {
  return pull_reply{id_, version_, clock_, slices_};
}

bucket_stats bucket_store::stats() const {
  return bucket_stats{id_, version_, version_, rejected_, max_staleness_, staleness_sum_, clock_};
}

}  // namespace troupe
