// The coordinator's checkpoints: every --checkpoint-every batches it pauses the workers (each
// finishes the push in flight), writes one file with the job's progress and every bucket's
// state, part by part as each bucket sends it, and lets the workers go on. The snapshot is
// consistent: the buckets hold exactly the pushes of the chunks recorded as finished. --resume
// starts a job from the newest checkpoint that reads back whole.
#include <fmt/format.h>

#include "actors/ps/ps_plan_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

job_checkpoint job_progress(const coordinator_state& st) {
  job_checkpoint job;
  st.ps->training.work->save(job);
  job.buckets = static_cast<uint32_t>(st.ps->directory.buckets.size());
  job.model_values = st.ps->directory.layout->total;
  job.epoch_loss = st.ps->training.epoch_loss;
  job.epoch_batches = st.ps->training.epoch_batches;
  job.evaluated = st.ps->evaluation.evaluated;
  job.history = st.shell.report.epochs;
  job.wall_s = st.shell.resumed_wall_s + st.shell.training_s();
  return job;
}

namespace {

// The checkpoint is written or skipped: the workers go on.
void resume_workers(self_ptr self) {
  auto& st = self->state;
  st.ps->checkpoints.taking = false;
  for (size_t i = 0; i < st.ps->roster.workers.size(); ++i)  // a worker being drained stays paused
    if (!st.ps->roster.worker_members[i].lost && !st.ps->roster.worker_members[i].draining)
      self->send(st.ps->roster.workers[i], resume_atom_v);
}

// No checkpoint this time (`why`): the workers go on, and whoever asked (the console) is told.
void skip_checkpoint(self_ptr self, const job_config& config, const std::string& why) {
  resume_workers(self);
  checkpoint_missed(self->state.shell, config.log,
                    make_error(errc::job_failed, "checkpoint skipped: " + why));
}

// The checkpoint's file is written (or failed): the workers go on.
void written_out(self_ptr self, const job_config& config, uint64_t step,
                 caf::expected<std::string> path, std::chrono::steady_clock::time_point began) {
  auto& st = self->state;
  resume_workers(self);
  if (!path)
    return checkpoint_missed(
        st.shell, config.log,
        make_error(errc::job_failed, "no checkpoint written: " + describe(path.error())));
  st.ps->checkpoints.chunks_at_step[step] = st.ps->checkpoints.chunks_done;
  while (st.ps->checkpoints.chunks_at_step.size() > config.opts.checkpoint_keep + 1u)
    st.ps->checkpoints.chunks_at_step.erase(st.ps->checkpoints.chunks_at_step.begin());
  checkpoint_written(st.shell, config.log, step, *path, seconds_since(began));
}

}  // namespace

void save_parts(self_ptr self, const job_config& config, uint32_t b, uint32_t index,
                std::shared_ptr<checkpoint_writer> file, uint32_t first,
                std::function<void(caf::error)> done) {
  if (b >= self->state.ps->directory.buckets.size()) return done(caf::error{});
  self->request(self->state.ps->directory.buckets[b], config.opts.request_timeout, save_atom_v,
                index)
      .then(
          [=](wire& part, uint32_t total) {
            if (auto err = file->add(first + b, std::move(part))) return done(std::move(err));
            if (index + 1 < total) return save_parts(self, config, b, index + 1, file, first, done);
            save_parts(self, config, b + 1, 0, file, first, done);
          },
          [=](caf::error& err) { done(std::move(err)); });
}

namespace {

void save_buckets(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::training || st.ps->directory.recovering > 0 ||
      st.ps->checkpoints.spoiled) {
    return skip_checkpoint(
        self, config,
        st.ps->checkpoints.spoiled ? "not every worker paused" : "a bucket is recovering");
  }
  // The workers are paused: the progress now is the progress of the buckets' state.
  const auto job = job_progress(st);
  const auto began = std::chrono::steady_clock::now();
  auto opened = checkpoint_writer::open(config.opts.checkpoint_dir, job,
                                        static_cast<uint32_t>(st.ps->directory.buckets.size()),
                                        config.opts.checkpoint_keep);
  if (!opened) return skip_checkpoint(self, config, describe(opened.error()));
  auto file = std::make_shared<checkpoint_writer>(std::move(*opened));
  save_parts(self, config, 0, 0, file, 0, [=](caf::error err) {
    if (self->state.shell.phase != job_phase::training)
      return skip_checkpoint(self, config, "the job is ending");
    if (err || self->state.ps->checkpoints.spoiled)
      return skip_checkpoint(self, config, err ? describe(err) : "a worker started meanwhile");
    written_out(self, config, job.step, file->finish(), began);
  });
}

}  // namespace

// Pauses every active worker; once none has a push in flight, saves the buckets.
void take_checkpoint(self_ptr self, const job_config& config) {
  auto& st = self->state;
  st.shell.checkpoints.since_last = 0;  // (skipped: the next one comes a full interval later)
  if (anyone_draining(st))              // nobody was paused
    return checkpoint_missed(
        st.shell, config.log,
        make_error(errc::job_failed, "checkpoint skipped: a node is being drained"));
  st.ps->checkpoints.taking = true;
  st.ps->checkpoints.spoiled = false;
  auto pending = std::make_shared<size_t>(1);  // held until every request is out
  auto paused = [=] {
    if (--*pending == 0) save_buckets(self, config);
  };
  for (size_t i = 0; i < st.ps->roster.workers.size(); ++i) {
    if (st.ps->roster.worker_members[i].lost) continue;
    ++*pending;
    self->request(st.ps->roster.workers[i], config.opts.request_timeout, pause_atom_v)
        .then([=](bool) { paused(); },
              [=](caf::error& err) {
                // A worker that may still be pushing would make the snapshot inconsistent.
                config.log.warn("worker {} did not pause ({})", i, describe(err));
                self->state.ps->checkpoints.spoiled = true;
                paused();
              });
  }
  paused();
}

void count_for_checkpoint(self_ptr self, const job_config& config, uint64_t batches) {
  auto& st = self->state;
  const uint64_t every =
      checkpoint_interval(config.opts, st.ps->training.work->batches_per_epoch());
  if (st.shell.checkpoints.count(batches, every) && !st.ps->checkpoints.taking &&
      st.ps->directory.recovering == 0 && st.shell.phase == job_phase::training)
    take_checkpoint(self, config);
}

caf::error check_resume(const coordinator_state& st, const job_config& config) {
  if (!st.ps->checkpoints.resume_from) return {};
  const auto& job = st.ps->checkpoints.resume_from->job;
  const auto& o = config.opts;
  auto differs = [](const char* what, uint64_t saved, uint64_t now) {
    return make_error(errc::bad_configuration,
                      fmt::format("the checkpoint has {} {}, this job {}: resume with the same "
                                  "model and flags",
                                  saved, what, now));
  };
  if (job.buckets != st.ps->directory.plan.buckets.size() ||
      st.ps->checkpoints.resume_from->buckets() != job.buckets)
    return differs("buckets", job.buckets, st.ps->directory.plan.buckets.size());
  if (o.hybrid()) return {};  // the tables' buckets: the dp plan checks the rest
  if (job.model_values != st.ps->directory.layout->total)
    return differs("model values", job.model_values, st.ps->directory.layout->total);
  if (job.epochs != o.epochs) return differs("epochs", job.epochs, o.epochs);
  if (job.chunk != chunk_of(o))
    return differs(o.diloco_mode() ? "local steps per round" : "batches per push", job.chunk,
                   chunk_of(o));
  if (job.batches_per_epoch != config.task->batches_per_epoch(o.batch))
    return differs("batches per epoch", job.batches_per_epoch,
                   config.task->batches_per_epoch(o.batch));
  return {};
}

void start_resumed(self_ptr self, const job_config& config) {
  auto& st = self->state;
  const job_checkpoint& job = st.ps->checkpoints.resume_from->job;
  st.shell.phase = job_phase::training;
  st.shell.started = std::chrono::steady_clock::now();
  st.ps->training.epoch_loss = job.epoch_loss;
  st.ps->training.epoch_batches = job.epoch_batches;
  st.ps->evaluation.evaluated = job.evaluated;
  st.shell.report.epochs = job.history;
  st.shell.report.resumed_from_step = job.step;
  st.shell.resumed_wall_s = job.wall_s;
  st.ps->evaluation.rows = config.task->evaluation_rows();
  st.ps->evaluation.rows.resize(config.task->sparse_tables().size());
  const auto workers = static_cast<uint32_t>(st.ps->roster.workers.size());
  st.ps->training.work.emplace(work_plan::restore(job, workers));
  auto spec = decode<bucket_spec>(st.ps->directory.specs[0]);
  const uint32_t saved_workers = spec ? spec->workers : workers;
  config.log.info("training resumes at step {}: {} workers, {} buckets", job.step, workers,
                  st.ps->directory.buckets.size());
  st.ps->checkpoints.resume_from.reset();  // `job` is gone from here on
  // Ranks the checkpoint knew that this job does not have hold nobody back.
  for (uint32_t r = workers; r < saved_workers; ++r) retire_everywhere(self, r);
  for (uint32_t r = 0; r < workers; ++r) start_at_slowest(self, config, r);
  maybe_evaluate(self, config);
}

}  // namespace troupe::ps_plan
