// The dp coordinator's steps and evaluation: each member's step reports (counted once per
// step, by the first report; a member's report of a step already counted for it is dropped, as
// a rejoining member sends again what the old primary may not have seen), the replicas'
// checksums, and member 0's parameters after each epoch, evaluated in turn.
#include <fmt/format.h>

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

namespace {

void compare_checksums(self_ptr self, const job_config& config, uint64_t step) {
  auto& st = self->state;
  auto it = st.dp->checksums.find(step);
  if (it == st.dp->checksums.end() || it->second.size() < live_count(st)) return;
  std::map<uint64_t, std::vector<std::string>> by_value;
  for (const auto& [rank, sum] : it->second)
    for (const auto& m : st.dp->members)
      if (!m.lost && m.rank == rank) by_value[sum].push_back(m.name);
  st.dp->checksums.erase(it);
  if (by_value.size() == 1) return;
  ++st.shell.report.checksum_mismatches;
  std::string groups;
  for (const auto& [sum, names] : by_value)
    groups += fmt::format("{}[{}]", groups.empty() ? "" : " vs ", fmt::join(names, ", "));
  fail_job(self, config, fmt::format("the replicas differ after step {}: {}", step, groups));
}

// Counts the report's examples towards its step; a step all of whose examples are reported is
// closed, and an epoch waiting for it may be evaluated.
void tally(self_ptr self, const job_config& config, const step_report& report) {
  auto& open = self->state.dp->open_steps[report.step];
  open.epoch = report.epoch;
  open.expected = report.step_examples;
  open.reported += report.examples;
  if (open.reported < open.expected) return;
  self->state.dp->open_steps.erase(report.step);
  open_checkpoint_when_settled(self, config);
  save_tables_when_settled(self, config);
  evaluate_next(self, config);
}

}  // namespace

void on_step(self_ptr self, const job_config& config, const wire& w) {
  auto& st = self->state;
  auto* m = sender(self);
  if (!m) return config.log.warn("ignored a step report from a stranger");
  if (m->lost) return refuse(self, config, *m);
  auto report = decode<step_report>(w);
  if (!report || report->epoch >= config.opts.epochs || report->generation > st.dp->generation)
    return config.log.warn("ignored a malformed step report from '{}'", m->name);
  if (report->step <= m->last_step) return;  // counted already (sent again after a takeover)
  if (m->compute_s > 0)  // this step's computing and collectives' time, not a pause between
    st.shell.stall.step_took(report->compute_s - m->compute_s + report->allreduce_s);
  if (report->own_non_finite) ++m->skipped_steps;
  m->last_step = report->step;
  ++m->steps;
  m->examples += report->examples;
  m->step_examples += report->step_examples;
  m->compute_s = report->compute_s;
  m->wall_s = report->wall_s;
  auto& r = st.shell.report;
  r.allreduce_bytes += report->bytes;
  (report->compressed ? r.allreduce_bytes_compressed : r.allreduce_bytes_warmup) += report->bytes;
  add(st.dp->group_metrics.bytes, double(report->bytes));
  if (st.dp->group_metrics.seconds) st.dp->group_metrics.seconds->observe(report->allreduce_s);
  r.allreduce_bytes_inter_host += report->bytes_inter_host;
  r.allreduce_s += report->allreduce_s;
  st.dp->exposed_s += report->exposed_s;
  st.dp->epoch_loss[report->epoch] += report->loss_sum;
  st.dp->epoch_examples[report->epoch] += report->skipped ? 0 : report->examples;
  st.shell.scalars.loss(report->loss_sum, report->skipped ? 0 : report->examples);
  st.shell.scalars.allreduce(report->allreduce_s, report->bytes);
  tally(self, config, *report);
  // Every member that applied a step reports it, in order; the first report counts it.
  if (report->step > st.dp->steps) {
    st.dp->applied_examples[report->epoch] += report->step_examples;
    st.shell.stall.progress(stall_watch::clock::now());
    if (report->skipped) add(st.shell.metrics.skipped, 1);
    if (auto why = count_skipped_step(report->skipped, "the group", st.dp->skipped_in_a_row,
                                      config.opts.max_consecutive_skipped_steps, st.shell.report))
      return fail_job(self, config, *why);
    (report->compressed ? r.steps_compressed : r.steps_warmup) += report->step - st.dp->steps;
    add(st.shell.metrics.batches, double(report->step - st.dp->steps));
    st.dp->steps = report->step;
    st.shell.scalars.group(st.dp->generation, static_cast<uint32_t>(live_count(st)));
    st.shell.scalars.at_step(st.dp->steps, st.shell.training_s(), st.dp->steps_per_epoch);
  }
  if (report->generation != st.dp->generation) return;
  if (st.dp->lost_at) {  // the first step of a generation formed after a loss
    r.reform_s = std::max(r.reform_s, seconds_since(*st.dp->lost_at));
    st.dp->lost_at.reset();
  }
  if (report->checksum != 0) {
    st.dp->checksums[report->step][report->rank] = report->checksum;
    compare_checksums(self, config, report->step);
  }
}

void close_open_steps(self_ptr self, const job_config& config) {
  self->state.dp->open_steps.clear();
  evaluate_next(self, config);
}

void evaluate_next(self_ptr self, const job_config& config) {
  auto& st = self->state;
  // During a takeover the epoch's losses are still coming from members yet to rejoin.
  if (st.dp->evaluating || st.dp->to_evaluate.empty() || st.shell.finishing() ||
      st.shell.succession.rejoining)
    return;
  // Nor before every member's report of the epoch's steps is in: the first member's
  // parameters may come before another member's last report.
  const uint32_t epoch_due = st.dp->to_evaluate.front().first;
  for (const auto& [step, open] : st.dp->open_steps)
    if (open.epoch <= epoch_due) return;
  st.dp->evaluating = true;
  auto [epoch, input] = st.dp->to_evaluate.front();
  st.dp->to_evaluate.pop_front();
  const bool rows_due = config.opts.hybrid() && !config.task->sparse_tables().empty();
  if (rows_due && input->rows.ids.empty()) {  // --mode hybrid: the rows first
    st.dp->to_evaluate.emplace_front(epoch, input);
    return pull_evaluation_rows(self, config, input, [=] {
      self->state.dp->evaluating = false;
      evaluate_next(self, config);
    });
  }
  self->request(st.dp->evaluator, config.opts.request_timeout * 10, eval_atom_v,
                std::shared_ptr<const eval_input>{input})
      .then(
          [=](const eval_output& out) {
            auto& st = self->state;
            st.dp->evaluating = false;
            if (!st.dp->snapshot_taken[epoch]) {  // the group went back before this epoch
              evaluate_next(self, config);
              return;
            }
            const double train_loss =
                st.dp->epoch_examples[epoch]
                    ? st.dp->epoch_loss[epoch] / double(st.dp->epoch_examples[epoch])
                    : 0.0;
            record_epoch(
                st.shell, config.opts,
                evaluated_epoch{epoch, &out, train_loss, (epoch + 1) * st.dp->steps_per_epoch,
                                st.dp->steps, config.opts.epochs * st.dp->steps_per_epoch});
            st.dp->evaluated = std::max(st.dp->evaluated, epoch + 1);
            send_standing(self, config);
            evaluate_next(self, config);
            maybe_finish(self, config);
          },
          [=](caf::error& err) { fail_job(self, config, "evaluation failed: " + describe(err)); });
}

// Every member sends the same parameters; each part is taken from whichever member's comes
// first, so a member lost while sending holds nobody up.
void on_snapshot(self_ptr self, const job_config& config, uint32_t epoch, uint32_t part,
                 const wire& w) {
  auto& st = self->state;
  auto* m = sender(self);
  if (!m) return config.log.warn("ignored parameters from a stranger");
  if (m->lost) return refuse(self, config, *m);
  if (epoch >= config.opts.epochs || st.dp->snapshot_taken[epoch]) return;
  if (!st.dp->model) {
    st.dp->model.emplace(config.task->parameters());
    st.dp->model_parts = message_parts(*st.dp->model);
  }
  const flat_layout& layout = *st.dp->model;
  const placement& parts = st.dp->model_parts;
  auto& into = st.dp->assembling[epoch];
  if (!into.input) {
    into.input = std::make_shared<eval_input>();
    into.input->params.assign(layout.total, 0.0f);
    into.got.assign(parts.buckets.size(), false);
    into.missing = parts.buckets.size();
  }
  if (part < into.got.size() && into.got[part]) return;  // another member's copy came first
  auto snapshot = decode<pull_reply>(w);
  if (!snapshot || part >= parts.buckets.size() || !matches(parts.buckets[part], snapshot->tensors))
    return fail_job(self, config,
                    fmt::format("'{}' sent bad parameters after epoch {}", m->name, epoch + 1));
  scatter(layout, snapshot->tensors, into.input->params);
  into.got[part] = true;
  if (--into.missing > 0) return;
  auto input = std::move(into.input);
  st.dp->assembling.erase(epoch);
  st.dp->snapshot_taken[epoch] = true;
  input->figures = epoch + 1 == config.opts.epochs;
  if (config.on_parameters) config.on_parameters(epoch, input->params);
  st.dp->to_evaluate.emplace_back(epoch, std::move(input));
  evaluate_next(self, config);
}

}  // namespace troupe::dp_plan
