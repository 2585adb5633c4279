#include "actors/ps/ps_plan.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "actors/ps/ps_plan_parts.hpp"
#include "actors/records/report.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

// Tells every bucket that worker `rank` will push no more (finished or lost), so that ssp and
// bsp stop waiting for it.
void retire_everywhere(self_ptr self, uint32_t rank) {
  for (auto& bucket : self->state.ps->directory.buckets) self->send(bucket, retire_atom_v, rank);
}

}  // namespace troupe::ps_plan

namespace troupe {

void ps_state::fill_report(coordinator_self self, const job_config&) {
  auto& st = self->state;
  job_report& r = st.shell.report;
  r.steps = r.resumed_from_step;
  for (const auto& m : roster.worker_members) r.steps += m.steps;
  r.wall_s = st.shell.wall_s();
  r.test_accuracy = r.epochs.empty() ? 0.0 : r.epochs.back().test_accuracy;
  r.workers.clear();
  const auto here = [&](const member& m) { return m.address && m.address.node() == self->node(); };
  for (const auto& m : roster.worker_members) {
    r.workers.push_back(worker_entry{m.name, m.steps, m.wall_s > 0 ? m.compute_s / m.wall_s : 0, 0,
                                     m.skipped_steps});
    r.workers.back().peak_rss_mb = peak_rss_mb(st.shell, m.name, here(m));
  }
  r.servers.clear();
  for (const auto& m : roster.server_members)
    r.servers.push_back(server_entry{m.name, peak_rss_mb(st.shell, m.name, here(m))});
}

void ps_state::live_members(std::vector<caf::actor>& out) const {
  for (size_t i = 0; i < roster.workers.size(); ++i)
    if (!roster.worker_members[i].lost)
      out.push_back(caf::actor_cast<caf::actor>(roster.workers[i]));
  for (size_t i = 0; i < roster.servers.size(); ++i)
    if (!roster.server_members[i].lost)
      out.push_back(caf::actor_cast<caf::actor>(roster.servers[i]));
}

void ps_state::end(const caf::error& ended) {
  for (auto& promise : tables_wanted) promise.deliver(ended);
  tables_wanted.clear();
  for (auto& home : directory.homes) {
    for (auto& promise : home.waiting) promise.deliver(ended);
    home.waiting.clear();
  }
}

void ps_state::wind_up(coordinator_self self, const job_config& config,
                       std::function<void()> then) {
  auto stats = std::make_shared<std::vector<bucket_stats>>();
  auto pending = std::make_shared<size_t>(directory.buckets.size() + 1);
  auto one_done = [=] {
    if (--*pending > 0) return;
    summarize_buckets(*stats, self->state.shell.report);
    then();
  };
  for (auto& bucket : directory.buckets) {
    self->request(bucket, config.opts.request_timeout, stats_atom_v)
        .then(
            [=](const wire& w) {
              if (auto s = decode<bucket_stats>(w)) stats->push_back(std::move(*s));
              one_done();
            },
            [=](caf::error& err) {
              config.log.warn("no statistics from a bucket: {}", describe(err));
              one_done();
            });
  }
  one_done();
}

std::string ps_state::summary(const job_report& r) const {
  return fmt::format(
      "{} updates applied, {} rejected, staleness mean {:.2f} p99 {} max {}, max clock gap {}",
      r.updates_applied, r.updates_rejected, r.mean_staleness, r.staleness_p99, r.max_staleness,
      r.max_clock_gap);
}

}  // namespace troupe

namespace troupe::ps_plan {

// Once no worker is active (every one finished or was lost), batches handed back by lost
// workers will never be done: they are given up, so that the epochs can complete.
void settle_work(self_ptr self, const job_config& config) {
  auto& st = self->state;
  const bool anyone_working =
      std::any_of(st.ps->roster.worker_members.begin(), st.ps->roster.worker_members.end(),
                  [](const member& w) { return !w.lost && !w.done; });
  if (!anyone_working)
    if (const uint64_t lost = st.ps->training.work->abandon_returned(); lost > 0)
      config.log.warn("{} batches were lost with the workers that held them", lost);
  maybe_evaluate(self, config);
}

// -- start ----------------------------------------------------------------------------------------

uint32_t chunk_of(const launch_options& o) {
  return o.diloco_mode() ? o.diloco.sync_every : std::max<uint32_t>(o.accumulate, 1);
}

start_job make_start(const coordinator_state& st, const launch_options& o, uint32_t rank) {
  std::vector<endpoint> servers;
  for (const auto& m : st.ps->roster.server_members) servers.push_back(m.data);
  start_job job{rank,     static_cast<uint32_t>(st.ps->roster.workers.size()),
                o.epochs, o.batch,
                o.seed,   st.ps->directory.plan,
                servers};
  job.accumulate = o.accumulate;
  job.prefetch = o.prefetch;
  job.compress_signs = o.compress_signs;
  job.pulls_held = o.consistency.type != consistency_config::mode::async;
  if (auto it = o.worker_delay_ms.find(rank); it != o.worker_delay_ms.end())
    job.delay_ms = it->second;
  if (o.diloco_mode()) {
    job.rounds = local_rounds{inner_optimizer_from(o), o.diloco.fragments, o.dp.dtype};
    if (auto it = o.dp.worker_slowdown.find(rank); it != o.dp.worker_slowdown.end())
      job.rounds->slowdown = it->second;
  }
  // How many live workers share this one's host (and so its cores); unknown without a label.
  const auto& workers = st.ps->roster.worker_members;
  if (rank < workers.size() && !workers[rank].host.empty())
    job.workers_on_host =
        static_cast<uint32_t>(std::count_if(workers.begin(), workers.end(), [&](const member& m) {
          return !m.lost && m.host == workers[rank].host;
        }));
  return job;
}

void start_training(self_ptr self, const job_config& config) {
  auto& st = self->state;
  st.shell.phase = job_phase::training;
  st.shell.started = std::chrono::steady_clock::now();
  const auto& o = config.opts;
  st.ps->training.epoch_loss.assign(o.epochs, 0.0);
  st.ps->training.epoch_batches.assign(o.epochs, 0);
  st.ps->evaluation.rows = config.task->evaluation_rows();
  st.ps->evaluation.rows.resize(config.task->sparse_tables().size());
  st.ps->training.work.emplace(o.epochs, config.task->batches_per_epoch(o.batch), chunk_of(o),
                               static_cast<uint32_t>(st.ps->roster.workers.size()));
  config.log.info("training: {} workers, {} servers, {} buckets, {} epochs",
                  st.ps->roster.workers.size(), st.ps->roster.servers.size(),
                  st.ps->directory.buckets.size(), o.epochs);
  for (uint32_t r = 0; r < st.ps->roster.workers.size(); ++r)
    self->send(st.ps->roster.workers[r], start_atom_v, encode(make_start(st, o, r)),
               st.ps->directory.buckets);
  send_standing(self, config);
}

// A worker joining a running (or resumed) job: every bucket makes room for it and names the
// clock it starts at (the slowest live worker's); then it is started from the current
// parameters.
// Asks bucket b where worker `rank` starts; once every bucket answered, starts it. A bucket
// that is restarting or being replaced is asked again once it is served.
void admit_at(self_ptr self, const job_config& config, uint32_t rank, uint32_t b,
              std::shared_ptr<size_t> pending, std::shared_ptr<uint64_t> clock) {
  const auto bucket = self->state.ps->directory.buckets[b];
  self->request(bucket, config.opts.request_timeout, admit_atom_v, rank)
      .then(
          [=](uint64_t start) {
            *clock = std::min(*clock, start);
            if (--*pending > 0) return;
            auto& st = self->state;
            if (st.ps->checkpoints.taking)
              st.ps->checkpoints.spoiled = true;  // it was never paused
            start_job job = make_start(st, config.opts, rank);
            job.clock = *clock;
            self->send(st.ps->roster.workers[rank], start_atom_v, encode(job),
                       st.ps->directory.buckets);
            config.log.info("worker {} starts at clock {}", rank, *clock);
          },
          [=](caf::error& err) {
            auto& st = self->state;
            if (err.category() == error_category)
              return fail_job(self, config,
                              fmt::format("admitting worker {}: {}", rank, describe(err)));
            auto again = [=] { admit_at(self, config, rank, b, pending, clock); };
            if (st.ps->directory.buckets[b] != bucket)
              again();
            else
              st.ps->directory.homes[b].when_served.push_back(again);
          });
}

void start_at_slowest(self_ptr self, const job_config& config, uint32_t rank) {
  auto& st = self->state;
  auto pending = std::make_shared<size_t>(st.ps->directory.buckets.size());
  auto clock = std::make_shared<uint64_t>(UINT64_MAX);
  for (uint32_t b = 0; b < st.ps->directory.buckets.size(); ++b)
    admit_at(self, config, rank, b, pending, clock);
}

// -- progress and evaluation --------------------------------------------------------------------

void record_evaluation(self_ptr self, const job_config& config, uint32_t epoch,
                       const eval_output& out) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::training) return;
  st.ps->evaluation.running = false;
  const double train_loss =
      st.ps->training.epoch_batches[epoch]
          ? st.ps->training.epoch_loss[epoch] / double(st.ps->training.epoch_batches[epoch])
          : 0.0;
  const uint64_t per_epoch = st.ps->training.work->batches_per_epoch();
  record_epoch(st.shell, config.opts,
               evaluated_epoch{epoch, &out, train_loss, uint64_t{epoch + 1} * per_epoch,
                               st.ps->training.work->finished_batches(),
                               uint64_t{config.opts.epochs} * per_epoch});
  st.ps->evaluation.evaluated = epoch + 1;
  if (st.ps->evaluation.evaluated == config.opts.epochs) return finish_job(self, config);
  maybe_evaluate(self, config);
}

namespace {

// How many buckets an evaluation pulls at once: the snapshot fills a few buckets at a time, so
// that the servers and this coordinator hold a few pull replies, not the model's.
constexpr uint32_t evaluation_pulls_at_once = 4;

// An evaluation's snapshot as its buckets are pulled into it.
struct evaluation_pulls {
  std::shared_ptr<eval_input> input;
  uint32_t epoch = 0;
  uint64_t round = 0;
  uint32_t next = 0;      // the next bucket to ask for
  uint32_t answered = 0;  // buckets in the snapshot
};

void run_evaluation(self_ptr self, const job_config& config, std::shared_ptr<evaluation_pulls> e) {
  const uint32_t epoch = e->epoch;
  const uint64_t round = e->round;
  if (config.on_parameters) config.on_parameters(epoch, e->input->params);
  self->request(self->state.ps->evaluation.actor, config.opts.request_timeout * 10, eval_atom_v,
                std::shared_ptr<const eval_input>{e->input})
      .then(
          [=](const eval_output& out) {
            if (self->state.ps->evaluation.round == round)
              record_evaluation(self, config, epoch, out);
          },
          [=](caf::error& err) { fail_job(self, config, "evaluation failed: " + describe(err)); });
}

// Pulls the next bucket (as an observer) into the snapshot; once every bucket is in, hands the
// snapshot to the evaluator.
void pull_for_evaluation(self_ptr self, const job_config& config,
                         std::shared_ptr<evaluation_pulls> e) {
  auto& st = self->state;
  const auto buckets = static_cast<uint32_t>(st.ps->directory.buckets.size());
  const uint32_t b = e->next++;
  const auto tables = config.task->sparse_tables();
  pull_request request{b, observer_worker, 0};
  if (!tables.empty()) request.rows = row_requests(tables, e->input->rows, b, buckets);
  self->request(st.ps->directory.buckets[b], config.opts.request_timeout, pull_atom_v,
                encode(request))
      .then(
          [=](const wire& w) {
            auto& st = self->state;
            if (st.shell.phase != job_phase::training || st.ps->evaluation.round != e->round)
              return;
            auto reply = decode<pull_reply>(w);
            if (!reply || !matches(st.ps->directory.plan.buckets[b], reply->tensors) ||
                fill_rows(tables, reply->rows, e->input->rows))
              return fail_job(self, config, fmt::format("bucket {} sent a bad snapshot", b));
            scatter(*st.ps->directory.layout, reply->tensors, e->input->params);
            if (++e->answered == buckets) return run_evaluation(self, config, e);
            if (e->next < buckets) pull_for_evaluation(self, config, e);
          },
          [=](caf::error& err) {
            auto& st = self->state;
            if (st.ps->evaluation.round != e->round) return;
            if (err.category() == error_category)
              return fail_job(self, config, fmt::format("pulling bucket {}: {}", b, describe(err)));
            // The bucket is gone for now (restarting, or its backup is taking over): the
            // heartbeat tick tries the evaluation again.
            if (st.ps->evaluation.running && st.shell.phase == job_phase::training)
              config.log.warn("evaluation waits for bucket {} ({})", b, describe(err));
            st.ps->evaluation.running = false;
          });
}

}  // namespace

// Pulls every bucket (as an observer), a few at a time, into one snapshot, with the embedding
// rows evaluation reads, and hands it to the evaluator.
void evaluate(self_ptr self, const job_config& config, uint32_t epoch) {
  auto& st = self->state;
  st.ps->evaluation.running = true;
  auto e = std::make_shared<evaluation_pulls>();
  e->epoch = epoch;
  e->round = ++st.ps->evaluation.round;
  e->input = std::make_shared<eval_input>();
  e->input->params.assign(st.ps->directory.layout->total, 0.0f);
  e->input->figures = epoch + 1 == config.opts.epochs;
  const auto tables = config.task->sparse_tables();
  if (!tables.empty()) {
    e->input->rows.ids = st.ps->evaluation.rows;
    for (size_t t = 0; t < tables.size(); ++t)
      e->input->rows.values.emplace_back(e->input->rows.ids[t].size() * tables[t].row_dim, 0.0f);
  }
  const auto buckets = static_cast<uint32_t>(st.ps->directory.buckets.size());
  for (uint32_t i = 0; i < std::min(buckets, evaluation_pulls_at_once); ++i)
    pull_for_evaluation(self, config, e);
}

void maybe_evaluate(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::training || st.ps->evaluation.running || !st.ps->training.work ||
      st.shell.succession.rejoining)
    return;
  if (st.ps->evaluation.evaluated < config.opts.epochs &&
      st.ps->training.work->epoch_complete(st.ps->evaluation.evaluated))
    evaluate(self, config, st.ps->evaluation.evaluated);
}

// The training curve and the terminal's progress line learn of a finished chunk.
void show_progress(self_ptr self, const job_config& config, const progress& report) {
  auto& st = self->state;
  const uint64_t done = st.ps->training.work->finished_batches();
  const double since = std::max(st.shell.training_s(), 1e-9);
  const uint32_t epoch = report.chunk.epoch;
  st.shell.curve.on_progress(st.shell.resumed_wall_s + since, done, epoch + 1, report.loss_sum,
                             report.chunk.count, report.staleness);
  st.shell.scalars.loss(report.loss_sum, report.chunk.count);
  st.shell.scalars.staleness(report.staleness);
  st.shell.scalars.at_step(done, st.shell.resumed_wall_s + since,
                           st.ps->training.work->batches_per_epoch());
  if (!st.shell.display.terminal()) return;
  const uint64_t total = uint64_t{config.opts.epochs} * st.ps->training.work->batches_per_epoch();
  const auto pace = throughput_of(done, st.shell.report.resumed_from_step, total, since);
  st.shell.display.update(epoch + 1, config.opts.epochs, st.ps->training.epoch_batches[epoch],
                          st.ps->training.work->batches_per_epoch(), pace.rate, pace.eta_s);
}

// A worker that rejoined a takeover finished a chunk before the takeover is over: its account
// (reconciled then) gets it.
void add_to_account(coordinator_state& st, const progress& report) {
  for (auto& account : st.ps->accounts) {
    if (account.rank != report.worker) continue;
    std::erase(account.held, report.chunk);
    account.finished.push_back(report.chunk);
    account.finished_loss.push_back(report.loss_sum);
  }
}

void add_chunk_loss(coordinator_state& st, const work_chunk& chunk, double loss_sum) {
  auto& loss = st.ps->training.epoch_loss[chunk.epoch];
  auto& batches = st.ps->training.epoch_batches[chunk.epoch];
  // A skipped chunk's loss is not finite: it counts as the epoch's mean so far.
  if (!std::isfinite(loss_sum)) loss_sum = batches ? loss / double(batches) * chunk.count : 0.0;
  loss += loss_sum;
  batches += chunk.count;
}

// Counts the skipped steps of a report into its worker's and the report's: the chunk's, or
// under --mode diloco each local step of the round in turn. The reason the job fails with once
// --max-consecutive-skipped-steps are skipped in a row, or none.
std::optional<std::string> count_skipped(self_ptr self, const job_config& config, member& m,
                                         const progress& report) {
  auto& st = self->state;
  const uint64_t limit = config.opts.max_consecutive_skipped_steps;
  auto one = [&](bool skipped) {
    if (skipped) {
      ++m.skipped_steps;
      add(st.shell.metrics.skipped, 1);
    }
    return count_skipped_step(skipped, m.name, m.skipped_in_a_row, limit, st.shell.report);
  };
  if (!config.opts.diloco_mode()) return one(report.skipped);
  auto skipped = report.skipped_local.begin();
  for (uint32_t i = 0; i < report.chunk.count; ++i) {
    const bool this_one = skipped != report.skipped_local.end() && *skipped == i;
    if (this_one) ++skipped;
    if (auto why = one(this_one)) return why;
  }
  return std::nullopt;
}

// One finished chunk of a worker's batch of reports, already checked to come from that worker.
void count_progress(self_ptr self, const job_config& config, const progress& report) {
  auto& st = self->state;
  auto& m = st.ps->roster.worker_members[report.worker];
  if (st.shell.succession.rejoining) {
    m.steps += report.chunk.count;
    return add_to_account(st, report);
  }
  if (!st.ps->training.work->finish(report.worker, report.chunk))
    return config.log.warn("ignored progress on a chunk '{}' does not hold", m.name);
  add_chunk_loss(st, report.chunk, report.loss_sum);
  m.steps += report.chunk.count;
  m.clock = report.clock;
  if (config.opts.diloco_mode()) {
    ++st.shell.report.rounds;
    st.shell.report.pseudo_gradient_bytes += report.pushed_bytes;
  }
  st.shell.stall.progress(stall_watch::clock::now());
  if (m.compute_s > 0) st.shell.stall.step_took(report.compute_s - m.compute_s);  // its computing
  if (auto why = count_skipped(self, config, m, report)) return fail_job(self, config, *why);
  add(st.shell.metrics.batches, report.chunk.count);
  m.compute_s = report.compute_s;
  m.wall_s = report.wall_s;
  m.last_loss = report.loss_sum / std::max<uint32_t>(report.chunk.count, 1);
  m.recent_losses.push_back(m.last_loss);
  if (m.recent_losses.size() > recent_loss_count) m.recent_losses.pop_front();
  show_progress(self, config, report);
  maybe_evaluate(self, config);
  ++st.ps->checkpoints.chunks_done;
  count_for_checkpoint(self, config, report.chunk.count);
}

void on_progress(self_ptr self, const job_config& config, const wire& w) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::training) return config.log.warn("ignored early progress");
  auto batch = decode<progress_batch>(w);
  if (!batch) return config.log.warn("ignored a malformed progress report");
  for (const auto& report : batch->reports) {
    if (report.worker >= st.ps->roster.worker_members.size())
      return config.log.warn("ignored a malformed progress report");
    const auto& m = st.ps->roster.worker_members[report.worker];
    if (!sent_by(self, m.address) || m.lost)
      return config.log.warn("ignored progress sent for another (or a lost) worker");
    count_progress(self, config, report);
    if (st.shell.phase != job_phase::training) return;  // the last report ended the training
  }
}

// -- the end ------------------------------------------------------------------------------------

caf::result<wire> claim(self_ptr self, uint32_t rank, uint32_t most) {
  auto& st = self->state;
  auto& workers = st.ps->roster.worker_members;
  if (st.shell.succession.rejoining ||
      (rank < workers.size() && !workers[rank].address && !workers[rank].lost))
    return make_error(errc::not_rejoined, "this coordinator is taking over: rejoin first");
  if (st.shell.phase != job_phase::training || rank >= workers.size() ||
      !sent_by(self, workers[rank].address))
    return make_error(errc::authentication_failed, "claims come from that worker only");
  if (workers[rank].lost) return make_error(errc::job_failed, "this worker was declared lost");
  auto lease = st.ps->training.work->claim_lease(rank, std::min(most, max_lease_chunks));
  if (!lease.chunks.empty()) st.shell.stall.progress(stall_watch::clock::now());
  return encode(lease);
}

void on_done(self_ptr self, const job_config& config, uint32_t rank) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::training || rank >= st.ps->roster.worker_members.size() ||
      !sent_by(self, st.ps->roster.worker_members[rank].address))
    return config.log.warn("ignored a done message that is not from that worker");
  st.ps->roster.worker_members[rank].done = true;
  if (st.shell.succession.rejoining) return;  // the takeover's end settles the work
  set(st.shell.metrics.workers, live_workers(st));
  retire_everywhere(self, rank);
  settle_work(self, config);
}

}  // namespace troupe::ps_plan
