#include "actors/records/job_scalars.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// The value at quantile q of `v` (nearest rank; v not empty; reorders v).
double quantile(std::vector<double>& v, double q) {
  const auto k = static_cast<size_t>(q * double(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

std::string settings_table(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string out = "| flag | value |\n|---|---|\n";
  for (const auto& [name, value] : settings)
    out += fmt::format("| --{} | {} |\n", name, value.empty() ? "(none)" : value);
  return out;
}

}  // namespace

job_scalars::job_scalars(const launch_options& opts, logger log)
    : directory_(opts.tensorboard),
      settings_(opts.tensorboard.empty() ? decltype(settings_){} : flag_settings(opts)),
      log_(std::move(log)) {}

tensorboard_writer* job_scalars::writer() {
  if (writer_ || failed_ || directory_.empty()) return writer_.get();
  auto opened = tensorboard_writer::open(directory_);
  if (!opened) {
    failed_ = true;
    log_.error("no TensorBoard figures: {}", describe(opened.error()));
    return nullptr;
  }
  writer_ = std::move(*opened);
  log_.info("TensorBoard figures go to {}", writer_->path());
  return writer_.get();
}

void job_scalars::loss(double sum, uint64_t count) {
  loss_sum_ += sum;
  loss_count_ += count;
}

void job_scalars::staleness(double mean) {
  if (on()) staleness_.push_back(mean);
}

void job_scalars::allreduce(double seconds, uint64_t bytes) {
  allreduce_s_ += seconds;
  allreduce_bytes_ += bytes;
  ++allreduce_steps_;
}

void job_scalars::group(uint64_t generation, uint32_t members) {
  group_ = {generation, members};
}

void job_scalars::at_step(uint64_t step, double t_s, uint64_t steps_per_epoch) {
  if (!on()) return;
  if (!last_) {  // the first step seen starts the clock; the settings go out with it
    last_ = {step, t_s};
    if (auto* w = writer()) w->text("settings", step, settings_table(settings_));
    return;
  }
  const uint64_t every = std::max<uint64_t>(1, steps_per_epoch / 20);
  if (step >= last_->first + every) write_interval(step, t_s);
}

void job_scalars::write_interval(uint64_t step, double t_s) {
  auto* w = writer();
  if (!w) return;
  if (loss_count_) w->scalar("train/loss", step, loss_sum_ / double(loss_count_));
  if (!staleness_.empty()) {
    w->scalar("staleness/p50", step, quantile(staleness_, 0.5));
    w->scalar("staleness/p99", step, quantile(staleness_, 0.99));
  }
  w->scalar("throughput/steps_per_s", step,
            double(step - last_->first) / std::max(t_s - last_->second, 1e-9));
  if (allreduce_steps_) {
    w->scalar("allreduce/seconds", step, allreduce_s_ / double(allreduce_steps_));
    w->scalar("allreduce/bytes", step, double(allreduce_bytes_));
  }
  if (group_) {
    w->scalar("group/generation", step, double(group_->first));
    w->scalar("group/members", step, double(group_->second));
  }
  w->flush();
  last_ = {step, t_s};
  loss_sum_ = 0;
  loss_count_ = 0;
  staleness_.clear();
  allreduce_s_ = 0;
  allreduce_bytes_ = allreduce_steps_ = 0;
}

void job_scalars::evaluation(uint64_t step, const epoch_entry& e) {
  if (!on()) return;
  auto* w = writer();
  if (!w) return;
  w->scalar("test/accuracy", step, e.test_accuracy);
  w->scalar("test/loss", step, e.test_loss);
  w->scalar("train/epoch_loss", step, e.train_loss);
  w->scalar("epoch", step, e.epoch);
  w->flush();
}

}  // namespace troupe
