// The data-parallel plan's checkpoints: member 0's state written in the checkpoint format (when
// the shell's schedule or the console asks member 0 for it), and
// --resume's checks and the progress it restores (the same progress a standing carries).
#include <fmt/format.h>

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

namespace {
// The most parts of member 0's state one checkpoint takes (each about 8 MiB: 16 G values).
constexpr uint32_t max_checkpoint_parts = uint32_t{1} << 16;
}  // namespace

// --resume: the checkpoint must be of this job (model, epochs, examples per step); the
// report's history and the progress go on from it.
caf::error take_resume(coordinator_state& st, const job_config& config) {
  const auto& job = st.dp->resume_from->job;
  const flat_layout layout{config.task->parameters()};
  auto differs = [](const char* what, uint64_t saved, uint64_t now) {
    return make_error(errc::bad_configuration,
                      fmt::format("cannot resume: the checkpoint has {} {}, this job {}; resume "
                                  "with the same model, flags and workers",
                                  saved, what, now));
  };
  if (job.buckets != 1 || st.dp->resume_from->buckets.size() != 1)
    return differs("buckets (a parameter-service checkpoint?)", job.buckets, 1);
  if (job.model_values != layout.total)
    return differs("model values", job.model_values, layout.total);
  if (job.epochs != config.opts.epochs) return differs("epochs", job.epochs, config.opts.epochs);
  if (job.chunk != st.dp->global_batch)
    return differs("examples per step", job.chunk, st.dp->global_batch);
  if (job.batches_per_epoch != st.dp->steps_per_epoch)
    return differs("steps per epoch", job.batches_per_epoch, st.dp->steps_per_epoch);
  adopt_progress(st, job);
  st.shell.report.resumed_from_step = job.step;
  st.shell.resumed_wall_s = job.wall_s;
  config.log.info("resuming after step {} of {}", job.step, st.dp->steps_per_epoch * job.epochs);
  return {};
}

void adopt_progress(coordinator_state& st, const job_checkpoint& job) {
  st.dp->steps = job.step;
  st.shell.report.epochs = job.history;
  st.dp->evaluated = job.evaluated;
  for (uint32_t e = 0; e < job.evaluated && e < st.dp->snapshot_taken.size(); ++e)
    st.dp->snapshot_taken[e] = true;
  for (size_t e = 0; e < job.epoch_loss.size() && e < st.dp->epoch_loss.size(); ++e)
    st.dp->epoch_loss[e] = job.epoch_loss[e];
  for (size_t e = 0; e < job.epoch_batches.size() && e < st.dp->epoch_examples.size(); ++e)
    st.dp->epoch_examples[e] = job.epoch_batches[e];
}

job_checkpoint progress_of(const coordinator_state& st, const job_config& config, uint64_t step) {
  job_checkpoint job;
  job.step = step;
  job.epochs = config.opts.epochs;
  job.batches_per_epoch = st.dp->steps_per_epoch;
  job.chunk = st.dp->global_batch;
  job.buckets = 1;
  job.model_values = flat_layout{config.task->parameters()}.total;
  job.next_epoch = static_cast<uint32_t>(step / std::max<uint64_t>(st.dp->steps_per_epoch, 1));
  job.next_batch = step % std::max<uint64_t>(st.dp->steps_per_epoch, 1);
  for (uint32_t e = 0; e < job.epochs; ++e)  // steps of each epoch applied
    job.finished.push_back(std::min(job.batches_per_epoch,
                                    step - std::min(step, uint64_t{e} * job.batches_per_epoch)));
  job.epoch_loss = st.dp->epoch_loss;
  job.epoch_batches = st.dp->epoch_examples;
  job.evaluated = st.dp->evaluated;
  job.history = st.shell.report.epochs;
  job.wall_s = st.shell.resumed_wall_s + st.shell.training_s();
  return job;
}

// Member 0's state after `step`, part by part in order (`count` 0 while more follow, the count
// with the last), written to the checkpoint's file as each comes; the last part finishes it.
void on_save(self_ptr self, const job_config& config, uint64_t step, uint32_t index, uint32_t count,
             const wire& part) {
  auto& st = self->state;
  auto* m = sender(self);
  if (!m || m->lost || m->rank != 0 || config.opts.checkpoint_dir.empty() ||
      index >= max_checkpoint_parts || (count != 0 && count != index + 1))
    return config.log.warn("ignored a checkpoint part that is not member 0's");
  auto& saving = st.dp->saving;
  auto missed = [&](const caf::error& err) {
    saving.reset();
    checkpoint_missed(st.shell, config.log,
                      make_error(errc::job_failed, fmt::format("no checkpoint after step {}: {}",
                                                               step, describe(err))));
  };
  if (index == 0) {
    saving.reset();  // (one member 0 never finished: its file goes)
    auto opened = checkpoint_writer::open(config.opts.checkpoint_dir, progress_of(st, config, step),
                                          1, config.opts.checkpoint_keep);
    if (!opened) return missed(opened.error());
    saving.emplace(dp_state::checkpoint_in_progress{std::move(*opened), step, 0,
                                                    std::chrono::steady_clock::now()});
  }
  if (!saving || step != saving->step || index != saving->next)
    return config.log.warn("ignored a checkpoint part out of order (step {}, part {})", step,
                           index);
  if (auto err = saving->file.add(0, part)) return missed(err);
  ++saving->next;
  if (count == 0) return;
  auto written = saving->file.finish();
  const auto began = saving->began;
  saving.reset();
  if (!written) return missed(written.error());
  checkpoint_written(st.shell, config.log, step, *written, seconds_since(began));
}

}  // namespace troupe::dp_plan
