// What a coordinator writes to TensorBoard under --tensorboard DIR, on the job's step axis
// (batches finished in --mode ps, optimizer steps in --mode dp; both continue across a
// takeover and a resume). The coordinator tells it what it learns (losses, staleness,
// collectives, generations) as reports arrive and calls at_step() after each; 20 times an
// epoch (every epoch's steps / 20, at least every step) it writes the figures since the last
// write:
//   train/loss, staleness/p50, staleness/p99 (over the chunks reported, each its pushes' mean
//   staleness), throughput/steps_per_s, allreduce/seconds (per step), allreduce/bytes,
//   group/generation, group/members;
// at each evaluation test/accuracy, test/loss and train/epoch_loss, and once the job's settings
// as text (settings). The event file is opened at the first figure, so a standby writes only
// once it has taken over. An error opening it is logged once and the job goes on without it.
// Owned by the coordinator's actor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "messages/types.hpp"
#include "troupe/log.hpp"
#include "troupe/options.hpp"
#include "troupe/tensorboard.hpp"

namespace troupe {

class job_scalars {
 public:
  job_scalars() = default;  // writes nothing
  job_scalars(const launch_options& opts, logger log);

  bool on() const { return !directory_.empty(); }

  void loss(double sum, uint64_t count);  // summed losses of `count` examples or batches
  void staleness(double mean);            // one chunk's
  void allreduce(double seconds, uint64_t bytes);
  void group(uint64_t generation, uint32_t members);

  // The job is at `step` after `t_s` seconds of training, in epochs of `steps_per_epoch`: the
  // figures since the last write go out if a twentieth of an epoch has passed.
  void at_step(uint64_t step, double t_s, uint64_t steps_per_epoch);
  // Epoch `e.epoch` evaluated at `step`.
  void evaluation(uint64_t step, const epoch_entry& e);

 private:
  tensorboard_writer* writer();
  void write_interval(uint64_t step, double t_s);

  std::string directory_;
  std::vector<std::pair<std::string, std::string>> settings_;
  logger log_;
  std::unique_ptr<tensorboard_writer> writer_;
  bool failed_ = false;
  // Since the last write:
  std::optional<std::pair<uint64_t, double>> last_;  // step, t_s
  double loss_sum_ = 0;
  uint64_t loss_count_ = 0;
  std::vector<double> staleness_;
  double allreduce_s_ = 0;
  uint64_t allreduce_bytes_ = 0, allreduce_steps_ = 0;
  std::optional<std::pair<uint64_t, uint32_t>> group_;
};

}  // namespace troupe
