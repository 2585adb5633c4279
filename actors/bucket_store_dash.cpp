// bucket_store's deferred DASH steps, for a bucket whose DASH runs on a GPU (--dash-device gpu).
#include "actors/bucket_store.hpp"

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

bool bucket_store::defer_dash(bool on) {
  if (!on) run_deferred_dash();
  defer_dash_ = on;
  bool any = false;
  for (const auto& d : dash_) any = any || (d && kernels::gpu_can_step(d->config()));
  return on && any;
}

size_t bucket_store::dash_slices() const {
  return static_cast<size_t>(
      std::count_if(dash_.begin(), dash_.end(), [](const auto& d) { return d.has_value(); }));
}

kernels::packed_dash_step bucket_store::pack_deferred_dash() const {
  const auto& job = deferred_.front();
  return kernels::pack_dash_step(*dash_[job.slice], slices_[job.slice].values, job.grad,
                                 first_moment_[job.slice], second_moment_[job.slice], job.step,
                                 job.lr);
}

caf::error bucket_store::complete_deferred_dash(const kernels::packed_dash_step& done) {
  if (deferred_.empty()) return make_error(errc::malformed_message, "no deferred DASH step");
  const size_t slice = deferred_.front().slice;
  auto resets = kernels::unpack_dash_step(done, *dash_[slice], slices_[slice].values,
                                          first_moment_[slice], second_moment_[slice]);
  if (!resets) return std::move(resets.error());
  dash_resets_ += *resets;
  deferred_.pop_front();
  return {};
}

void bucket_store::run_deferred_dash() {
  for (auto& job : deferred_)
    dash_resets_ +=
        dash_[job.slice]->step(slices_[job.slice].values, job.grad, first_moment_[job.slice],
                               second_moment_[job.slice], job.step, job.lr);
  deferred_.clear();
}

}  // namespace troupe
