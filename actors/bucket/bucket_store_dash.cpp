// bucket_store's deferred DASH steps, for a bucket whose DASH runs on a GPU (--dash-device gpu).
#include "actors/bucket/bucket_store.hpp"

#include <algorithm>

#include "actors/bucket/kernel_errors.hpp"

namespace troupe {

bool bucket_store::defer_dash(bool on) {
  run_deferred_dash();  // a restarted bucket's owner may have left some
  defer_dash_ = on;
  if (!on) spare_package_.reset();  // up to max_packed_bytes that the CPU steps do not use
  bool any = false;
  for (size_t s = 0; s < dash_.size(); ++s) any = any || device_steps(s);
  return on && any;
}

bool bucket_store::device_steps(size_t slice) const {
  const auto& d = dash_[slice];
  return defer_dash_ && d && kernels::gpu_can_step(d->config()) &&
         kernels::packed_floats(*d) * sizeof(float) <= kernels::max_packed_bytes;
}

size_t bucket_store::dash_slices() const {
  return static_cast<size_t>(
      std::count_if(dash_.begin(), dash_.end(), [](const auto& d) { return d.has_value(); }));
}

size_t bucket_store::device_slices() const {
  size_t n = 0;
  for (size_t s = 0; s < dash_.size(); ++s) n += device_steps(s) ? 1 : 0;
  return n;
}

kernels::packed_dash_step bucket_store::pack_deferred_dash() {
  const auto& job = deferred_.front();
  return kernels::pack_dash_step(*dash_[job.slice], slices_[job.slice].values, job.grad,
                                 first_moment_[job.slice], second_moment_[job.slice], job.step,
                                 job.lr, std::move(spare_package_));
}

caf::error bucket_store::complete_deferred_dash(kernels::packed_dash_step& done) {
  auto write_back = [&]() -> caf::error {
    if (deferred_.empty()) return make_error(errc::malformed_message, "no deferred DASH step");
    const size_t slice = deferred_.front().slice;
    if (done.hyper.step != deferred_.front().step)
      return make_error(errc::malformed_message, "a stepped DASH package of another step");
    auto resets = kernels::unpack_dash_step(done, *dash_[slice], slices_[slice].values,
                                            first_moment_[slice], second_moment_[slice]);
    if (!resets) return make_error(resets.error());
    dash_resets_ += *resets;
    deferred_.pop_front();
    return {};
  };
  auto err = write_back();
  if (done.values) spare_package_ = std::move(done.values);  // spent, written back or not
  return err;
}

void bucket_store::run_deferred_dash() {
  for (auto& job : deferred_)
    dash_resets_ +=
        dash_[job.slice]->step(slices_[job.slice].values, job.grad, first_moment_[job.slice],
                               second_moment_[job.slice], job.step, job.lr);
  deferred_.clear();
}

}  // namespace troupe
