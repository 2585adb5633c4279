// The data-parallel plan's checkpoints: member 0's state written in the checkpoint format (when
// the shell's schedule or the console asks member 0 for it), and
// --resume's checks and the progress it restores (the same progress a standing carries).
#include <fmt/format.h>

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "actors/ps/ps_plan_parts.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

namespace {
// The most parts of member 0's state one checkpoint takes (each about 8 MiB: 16 G values).
constexpr uint32_t max_checkpoint_parts = uint32_t{1} << 16;

// --mode hybrid: the tables' buckets, which a checkpoint holds after the model's state.
uint64_t table_buckets(const coordinator_state& st, const job_config& config) {
  return config.opts.hybrid() ? st.ps->directory.plan.buckets.size() : 0;
}

// The buckets of the model's state in a checkpoint saved under `zero_stage`: member 0's
// state, or with sharded state its parameters and then every member's pieces.
uint32_t model_buckets(uint32_t zero_stage) {
  return zero_stage > 0 ? 2 : 1;
}
}  // namespace

void split_hybrid_checkpoint(coordinator_state& st) {
  st.ps->checkpoints.resume_from =
      st.dp->resume_from->from(model_buckets(st.dp->resume_from->job.zero_stage));
}

namespace {

// Whether checkpoint `job` is of this job (model, epochs, examples per step, steps per epoch,
// its buckets): errc::bad_configuration saying what differs.
caf::error check_job(const coordinator_state& st, const job_config& config,
                     const job_checkpoint& job, uint32_t file_buckets) {
  const flat_layout layout{config.task->parameters()};
  auto differs = [](const char* what, uint64_t saved, uint64_t now) {
    return make_error(errc::bad_configuration,
                      fmt::format("the checkpoint has {} {}, this job {}; resume "
                                  "with the same model, flags and workers",
                                  saved, what, now));
  };
  const uint64_t buckets = model_buckets(job.zero_stage) + table_buckets(st, config);
  if (job.buckets != buckets || file_buckets != buckets)
    return differs(config.opts.hybrid() ? "buckets (the model's, then the tables')"
                                        : "buckets (a parameter-service checkpoint?)",
                   job.buckets, buckets);
  if (job.model_values != layout.total)
    return differs("model values", job.model_values, layout.total);
  if (job.epochs != config.opts.epochs) return differs("epochs", job.epochs, config.opts.epochs);
  if (job.chunk != st.dp->global_batch)
    return differs("examples per step", job.chunk, st.dp->global_batch);
  if (job.batches_per_epoch != st.dp->steps_per_epoch)
    return differs("steps per epoch", job.batches_per_epoch, st.dp->steps_per_epoch);
  return {};
}

}  // namespace

// --resume: the checkpoint must be of this job (model, epochs, examples per step); the
// report's history and the progress go on from it.
caf::error take_resume(coordinator_state& st, const job_config& config) {
  const auto& job = st.dp->resume_from->job;
  if (auto err = check_job(st, config, job, st.dp->resume_from->buckets()))
    return make_error(errc::bad_configuration, "cannot resume: " + describe(err));
  adopt_progress(st, job);
  st.shell.report.resumed_from_step = job.step;
  st.shell.resumed_wall_s = job.wall_s;
  config.log.info("resuming after step {} of {}", job.step, st.dp->steps_per_epoch * job.epochs);
  return {};
}

caf::expected<uint64_t> go_back_to_checkpoint(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (config.opts.hybrid())
    return make_error(errc::job_failed, "a hybrid job's tables do not go back with its model");
  if (config.opts.checkpoint_dir.empty())
    return make_error(errc::job_failed, "there is no checkpoint to go back to (--checkpoint-dir)");
  auto loaded = read_newest_checkpoint(config.opts.checkpoint_dir);
  if (!loaded) return std::move(loaded.error());
  for (const auto& line : loaded->skipped) config.log.warn("{}", line);
  const auto& job = loaded->data.job;
  if (auto err = check_job(st, config, job, loaded->data.buckets())) return err;
  if (job.step > st.dp->steps || job.zero_stage != config.opts.dp.zero_stage)
    return make_error(errc::job_failed, "the newest checkpoint is not one of this job's");
  abandon_checkpoint(self, config, "the group went back to an earlier checkpoint");
  adopt_progress(st, job);
  // What the steps after it counted goes: each member's reports count again from it, and the
  // epochs after it are evaluated again.
  const uint64_t examples = config.task->batches_per_epoch(1);
  for (uint32_t e = 0; e < job.epochs && e < st.dp->applied_examples.size(); ++e)
    st.dp->applied_examples[e] = std::min(examples, job.finished[e] * st.dp->global_batch);
  for (auto& m : st.dp->members) m.last_step = std::min(m.last_step, job.step);
  for (uint32_t e = job.evaluated; e < st.dp->snapshot_taken.size(); ++e) {
    st.dp->snapshot_taken[e] = false;
    st.dp->assembling.erase(e);
  }
  std::erase_if(st.dp->to_evaluate, [&](const auto& due) { return due.first >= job.evaluated; });
  st.dp->resume_from = std::move(loaded->data);
  return job.step;
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
  job.zero_stage = config.opts.dp.zero_stage;
  job.buckets = model_buckets(job.zero_stage) + table_buckets(st, config);
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

namespace {

// How long the coordinator gives a hybrid checkpoint's tables, in request timeouts: less than
// member 0 waits for its last part (10, dp_trainer_step.cpp), so that the file is never written
// after member 0 went on (its next step's rows could be in the tables by then).
constexpr int tables_save_timeouts = 8;

void checkpoint_failed(coordinator_state& st, const job_config& config, uint64_t step,
                       const caf::error& err) {
  st.dp->saving.reset();
  checkpoint_missed(st.shell, config.log,
                    make_error(errc::job_failed, fmt::format("no checkpoint after step {}: {}",
                                                             step, describe(err))));
}

// The file has every part: it is synced and named, and member 0 (waiting in hybrid) goes on.
void finish_checkpoint(self_ptr self, const job_config& config) {
  auto& st = self->state;
  auto saving = std::move(*st.dp->saving);
  st.dp->saving.reset();
  auto written = saving.file->finish();
  if (!written)
    checkpoint_failed(st, config, saving.step, written.error());
  else
    checkpoint_written(st.shell, config.log, saving.step, *written, seconds_since(saving.began));
  if (saving.last_part) saving.last_part->deliver(true);
}

// The file has every part but the tables': finished now, or in --mode hybrid once the tables
// are saved after the step settles (member 0's last part waits until then).
void model_state_written(self_ptr self, const job_config& config) {
  if (config.opts.hybrid()) return save_tables_when_settled(self, config);
  finish_checkpoint(self, config);
}

// Part `index` of member `rank`'s pieces into the file (the parameters are in): written, and
// the last of every member's ends the model's state. Member 0's last part in --mode hybrid is
// answered only once the file is finished.
caf::result<bool> write_piece(self_ptr self, const job_config& config, uint32_t rank,
                              uint32_t index, uint32_t count, wire part) {
  auto& saving = *self->state.dp->saving;
  if (rank >= saving.members || index != saving.pieces_next[rank] ||
      (count != 0 && count != index + 1)) {
    checkpoint_failed(self->state, config, saving.step,
                      make_error(errc::malformed_message,
                                 fmt::format("member {}'s pieces came out of order", rank)));
    return true;
  }
  if (auto err = saving.file->add(1, std::move(part))) {
    checkpoint_failed(self->state, config, saving.step, err);
    return true;
  }
  ++saving.pieces_next[rank];
  if (count == 0) return true;
  --saving.pieces_left;
  std::optional<caf::typed_response_promise<bool>> held;
  if (rank == 0 && config.opts.hybrid()) {
    saving.last_part = self->make_response_promise<bool>();
    saving.deadline =
        std::chrono::steady_clock::now() + config.opts.request_timeout * tables_save_timeouts;
    held = *saving.last_part;
  }
  if (saving.pieces_left == 0) model_state_written(self, config);
  if (held) return *held;
  return true;
}

// The pieces that waited for the parameters of the checkpoint after `step`: written now (any
// of another step answered and dropped).
void write_waiting_pieces(self_ptr self, const job_config& config) {
  auto waiting = std::move(self->state.dp->pieces_waiting);
  self->state.dp->pieces_waiting.clear();
  for (auto& w : waiting) {
    auto& saving = self->state.dp->saving;
    if (!saving || w.step != saving->step) {
      w.answer.deliver(true);
      continue;
    }
    write_piece(self, config, w.rank, w.index, w.count, std::move(w.part));
    w.answer.deliver(true);  // (member 0's pieces come after its parameters: none waits)
  }
}

}  // namespace

void abandon_checkpoint(self_ptr self, const job_config& config, const std::string& why) {
  auto& st = self->state;
  if (st.dp->opening) st.dp->opening->answer.deliver(true);
  st.dp->opening.reset();
  for (auto& w : st.dp->pieces_waiting) w.answer.deliver(true);
  st.dp->pieces_waiting.clear();
  if (!st.dp->saving || st.dp->saving->members == 0) return;
  if (st.dp->saving->last_part) st.dp->saving->last_part->deliver(true);
  checkpoint_failed(st, config, st.dp->saving->step, make_error(errc::job_failed, why));
}

caf::result<bool> on_save_pieces(self_ptr self, const job_config& config, uint64_t step,
                                 uint32_t index, uint32_t count, const wire& part) {
  auto& st = self->state;
  auto* m = sender(self);
  if (!m || m->lost || config.opts.checkpoint_dir.empty() || config.opts.dp.zero_stage == 0) {
    config.log.warn("ignored pieces of a checkpoint that are not a member's");
    return true;
  }
  auto& saving = st.dp->saving;
  if (saving && saving->step == step && saving->members > 0 && saving->parameters_done)
    return write_piece(self, config, m->rank, index, count, part);
  // (a checkpoint given up on, or one whose parameters member 0 never sent)
  if ((saving && saving->step > step) || (!saving && step <= st.dp->save_opened_step) ||
      st.dp->pieces_waiting.size() >= 4 * st.dp->members.size())
    return true;
  auto answer = self->make_response_promise<bool>();
  st.dp->pieces_waiting.push_back(
      dp_state::waiting_piece{static_cast<uint32_t>(m->rank), step, index, count, part, answer});
  return answer;
}

namespace {

// Whether every member's report of `step` and of the steps before it is in.
bool settled(const coordinator_state& st, uint64_t step) {
  return st.dp->open_steps.empty() || st.dp->open_steps.begin()->first > step;
}

// Member 0's part `index`, checked to be its: written (part 0 opens the file).
caf::result<bool> take_part(self_ptr self, const job_config& config, uint64_t step, uint32_t index,
                            uint32_t count, const wire& part) {
  auto& st = self->state;
  auto& saving = st.dp->saving;
  if (index == 0) {
    abandon_tables_save(self, config, make_error(errc::job_failed, "member 0 began another"));
    saving.reset();  // (one member 0 never finished: its file goes)
    st.dp->save_opened_step = step;
    const auto progress = progress_of(st, config, step);
    auto opened = checkpoint_writer::open(config.opts.checkpoint_dir, progress, progress.buckets,
                                          config.opts.checkpoint_keep);
    if (!opened) {
      checkpoint_failed(st, config, step, opened.error());
      return true;
    }
    saving.emplace(
        dp_state::checkpoint_in_progress{std::make_shared<checkpoint_writer>(std::move(*opened)),
                                         step, 0, std::chrono::steady_clock::now()});
    if (config.opts.dp.zero_stage > 0) {
      saving->members = static_cast<uint32_t>(st.dp->generation_members.size());
      saving->pieces_next.assign(saving->members, 0);
      saving->pieces_left = saving->members;
    }
  }
  if (!saving || step != saving->step || index != saving->next || saving->last_part) {
    config.log.warn("ignored a checkpoint part out of order (step {}, part {})", step, index);
    return true;
  }
  if (auto err = saving->file->add(0, part)) {
    checkpoint_failed(st, config, step, err);
    return true;
  }
  ++saving->next;
  if (count == 0) return true;
  if (saving->members > 0) {  // the pieces follow
    saving->parameters_done = true;
    write_waiting_pieces(self, config);
    return true;
  }
  if (!config.opts.hybrid()) {
    finish_checkpoint(self, config);
    return true;
  }
  saving->last_part = self->make_response_promise<bool>();
  saving->deadline =
      std::chrono::steady_clock::now() + config.opts.request_timeout * tables_save_timeouts;
  auto answer = *saving->last_part;
  save_tables_when_settled(self, config);
  return answer;
}

}  // namespace

// Member 0's state after `step`, part by part in order (`count` 0 while more follow, the count
// with the last), written to the checkpoint's file as each comes; the last part finishes it
// (in hybrid, once the tables are saved after it).
caf::result<bool> on_save(self_ptr self, const job_config& config, uint64_t step, uint32_t index,
                          uint32_t count, const wire& part) {
  auto& st = self->state;
  auto* m = sender(self);
  if (!m || m->lost || m->rank != 0 || config.opts.checkpoint_dir.empty() ||
      index >= max_checkpoint_parts || (count != 0 && count != index + 1)) {
    config.log.warn("ignored a checkpoint part that is not member 0's");
    return true;
  }
  // The file's job part holds the progress through `step`, so it is opened once every member's
  // report of that step is in (member 0 waits for this answer, so none of a later step comes).
  if (index == 0 && count == 0 && !settled(st, step)) {
    if (st.dp->opening) st.dp->opening->answer.deliver(true);
    auto answer = self->make_response_promise<bool>();
    st.dp->opening.emplace(dp_state::checkpoint_opening{step, part, answer});
    return answer;
  }
  return take_part(self, config, step, index, count, part);
}

void open_checkpoint_when_settled(self_ptr self, const job_config& config) {
  auto& opening = self->state.dp->opening;
  if (!opening || !settled(self->state, opening->step)) return;
  auto held = std::move(*opening);
  opening.reset();
  take_part(self, config, held.step, 0, 0, held.part);  // (a first part of more: true)
  held.answer.deliver(true);
}

void save_tables_when_settled(self_ptr self, const job_config& config) {
  auto& st = self->state;
  auto& saving = st.dp->saving;
  if (!saving || !saving->last_part || saving->saving_tables || saving->pieces_left > 0 ||
      st.dp->open_steps.count(saving->step))
    return;
  saving->saving_tables = true;
  const uint64_t step = saving->step;
  ps_plan::save_parts(self, config, 0, 0, saving->file, model_buckets(config.opts.dp.zero_stage),
                      [=](caf::error err) {
                        auto& saving = self->state.dp->saving;
                        if (!saving || saving->step != step || !saving->saving_tables)
                          return;  // abandoned
                        if (!err && std::chrono::steady_clock::now() > saving->deadline)
                          err = make_error(errc::timeout,
                                           "the tables' buckets took past the checkpoint's bound");
                        if (!err) return finish_checkpoint(self, config);
                        abandon_tables_save(self, config, err);
                      });
}

void abandon_tables_save(self_ptr self, const job_config& config, const caf::error& why) {
  auto& saving = self->state.dp->saving;
  if (!saving || !saving->last_part) return;
  auto answer = std::move(*saving->last_part);
  checkpoint_failed(self->state, config, saving->step, why);
  answer.deliver(true);
}

void check_tables_deadline(self_ptr self, const job_config& config) {
  auto& saving = self->state.dp->saving;
  if (saving && saving->last_part && std::chrono::steady_clock::now() > saving->deadline)
    abandon_tables_save(
        self, config,
        make_error(errc::job_failed, "not every member's rows reached the tables in time"));
}

}  // namespace troupe::dp_plan
