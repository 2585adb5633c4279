#include "actors/dp/trainer/dp_trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "actors/dp/trainer/store_pieces.hpp"
#include "actors/supervision/node_control.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace dp_parts {

using clock_type = std::chrono::steady_clock;

namespace {
void apply_start(self_ptr self, const dp_trainer_config& config, group_start job);
void send_evaluation_part(self_ptr self, const dp_trainer_config& config, size_t index);
}  // namespace

void fail(self_ptr self, const dp_trainer_config& config, const std::string& doing,
          const caf::error& err) {
  config.log.error("stopping: {}: {}", doing, describe(err));
  self->quit(make_error(errc::job_failed, doing + ": " + describe(err)));
}

// After a step (or a new generation's agreement that moved us on): the parameters after an
// epoch go to the coordinator for evaluation (every member sends them; it keeps the first),
// then a new generation that arrived meanwhile is formed, or the next step runs, or done is
// said after the last.
void go_on(self_ptr self, const dp_trainer_config& config, bool snapshot) {
  auto& st = self->state;
  if (snapshot && st.step > 0 && st.step % st.steps_per_epoch == 0) {
    st.evaluation_parts = message_parts(*st.layout);
    return send_evaluation_part(self, config, 0);  // goes on once the last part is in
  }
  if (st.pending) {
    auto next = std::move(*st.pending);
    st.pending.reset();
    return apply_start(self, config, std::move(next));
  }
  if (st.step >= st.total_steps) {
    config.log.info("trained {} steps", st.step);
    self->send(coordinator_of(config), done_atom_v, st.job->rank);
    return;
  }
  self->send(self, run_atom_v);
}

namespace {

// Part `index` of the epoch's parameters to the coordinator, the next once it has this one:
// one part in flight, and no step meanwhile (the parameters stay those of the epoch's end).
void send_evaluation_part(self_ptr self, const dp_trainer_config& config, size_t index) {
  auto& st = self->state;
  const auto& buckets = st.evaluation_parts.buckets;
  if (index >= buckets.size()) {
    st.evaluation_parts.buckets.clear();
    return go_on(self, config, false);
  }
  const auto epoch = static_cast<uint32_t>(st.step / st.steps_per_epoch - 1);
  const auto& part = buckets[index];
  pull_reply parameters{
      part.bucket, st.step, vector_clock{}, gather(*st.layout, part, st.params), {}};
  auto next = [=](bool delivered) {
    if (delivered) return send_evaluation_part(self, config, index + 1);
    // The coordinator did not answer (lost): the other parts are only held for its standby,
    // sent when this member rejoins it, rather than each waiting out a request's timeout.
    auto& st = self->state;
    if (config.coordinator->standby_listed())
      for (size_t k = index + 1; k < st.evaluation_parts.buckets.size(); ++k) {
        const auto& rest = st.evaluation_parts.buckets[k];
        st.held_parameters[{epoch, rest.bucket}] = encode(pull_reply{
            rest.bucket, st.step, vector_clock{}, gather(*st.layout, rest, st.params), {}});
      }
    st.evaluation_parts.buckets.clear();
    go_on(self, config, false);
  };
  send_parameters(self, config, epoch, part.bucket, encode(parameters), next);
}

}  // namespace

void table_push_done(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  if (--st.table_pushes_due > 0 || !st.settling) return;
  st.settling = false;
  on_step_settled(self, config);
}

// A collective of this generation failed: the step is abandoned (nothing was applied) and
// the coordinator told; it forms a new generation, within a bound.
void wait_for_generation(self_ptr self, const dp_trainer_config& config, const std::string& why) {
  auto& st = self->state;
  config.coordinator->activity().set(config.name, fmt::format("after step {}", st.step),
                                     "coordinator: a new generation");
  if (st.shard) keep_pending_sums(st);  // (before a new generation's buffers replace the step's)
  st.in_step = false;
  st.forming = false;
  st.broken = true;
  // The step is abandoned here; its rows wait for the new generation's agreement, which may
  // adopt the step from a member that finished it (synced).
  if (st.pending) return go_on(self, config, false);
  self->send(coordinator_of(config), broken_atom_v, st.job->generation, why);
  const auto bound = std::chrono::milliseconds(3 * st.job->timeout_ms) + 2 * config.request_timeout;
  self->delayed_send(self, bound, tick_atom_v, st.job->generation);
}

void size_buffers(dp_trainer_state& st) {
  const auto& job = *st.job;
  st.meta_len = meta_size + job.size + st.model_buffer_values;
  st.values.reset();  // (a reduce order still in flight keeps the old one until it is done)
  const bool streamed = st.shard && st.shard->streamed;  // (its gradient is in buckets)
  st.values =
      std::make_shared<std::vector<float>>(st.meta_len + (streamed ? 0 : st.layout->total), 0.0f);
  auto f = std::make_shared<feedback_buffers>();
  const bool onebit = job.compression.adam != compressed_adam::none;
  f->worker.assign(onebit ? st.layout->total : 0, 0.0f);
  size_t server = 0;
  for (const auto& b : st.buckets) {
    f->server_offsets.push_back(server);
    if (onebit) server += compressed_chunk(b.end - b.begin, job.size);
  }
  f->server.assign(server, 0.0f);
  st.feedback = std::move(f);
}

namespace {

// The agreement is over (or failed): the store comes back from it, the one this member goes on
// with (its own or the source's); none when a hand-over into it failed (spoiled).
void take_store_back(dp_trainer_state& st, store_pieces& pieces) {
  st.agreeing = false;
  st.optimizer = std::move(pieces).result();
  st.spoiled = !st.optimizer;
  if (!st.spoiled) bind_params(st);
}

// The new generation is formed: go on from the state the members agreed on.
void synced(self_ptr self, const dp_trainer_config& config, const sync_result& agreed) {
  auto& st = self->state;
  if (st.adam) st.adam->restart(*st.optimizer);
  const bool moved = agreed.steps != st.step;
  if (moved || st.job->generation > 1)
    config.log.info(
        "generation {}: member {} of {}, going on after step {} ({})", st.job->generation,
        st.job->rank, st.job->size, agreed.steps,
        st.shard ? "the sharded state cut anew" : fmt::format("member {}'s state", agreed.source));
  // This member's rows of a step it abandoned but another member finished (the agreed state
  // includes it) are pushed now; those of a step nobody finished are dropped.
  if (!st.rows_due.empty() && agreed.steps >= st.rows_step) push_share_rows(self, config, false);
  st.rows_due.clear();
  // A sharded step this member computed, whose pieces every member took but whose gather
  // failed (or which it took only now, rolled forward), was never reported: it is now.
  const bool unreported =
      st.shard && agreed.steps > st.step && st.shard->computed_step == agreed.steps;
  st.step = agreed.steps;
  if (unreported)
    send_report(self, config, st.step,
                encode(report_of(st, !st.shard->pieces->last_applied, 0.0, 0)));
  st.broken = false;
  st.forming = false;
  go_on(self, config, moved);
}

// The longest a hand-over of the model's state may take: its values and up to two moments at
// a floor of 64 MiB/s (from the model, so that a member whose state was spoiled waits as long).
std::chrono::milliseconds hand_over_bound(const dp_trainer_state& st) {
  const uint64_t bytes = 3 * st.layout->total * sizeof(float);
  return std::chrono::milliseconds(bytes / ((uint64_t{64} << 20) / 1000));
}

// The agreement of `generation` answered `agreed` (or failed with `err`): the store comes
// back; a generation that came meanwhile is formed now, else this one goes on or waits.
void after_agreement(self_ptr self, const dp_trainer_config& config, uint64_t generation,
                     const sync_result* agreed, const caf::error& err) {
  auto& st = self->state;
  if (st.pending) return go_on(self, config, false);
  if (st.job->generation != generation) return;
  if (agreed) return synced(self, config, *agreed);
  if (has_code(err, errc::job_failed) || has_code(err, errc::shape_mismatch))
    return fail(self, config, "agreeing on the model's state", err);
  wait_for_generation(self, config, describe(err));
}

void agreement_over(self_ptr self, const dp_trainer_config& config, uint64_t generation,
                    store_pieces& pieces, const sync_result* agreed, const caf::error& err) {
  auto& st = self->state;
  take_store_back(st, pieces);
  if (st.spoiled)
    config.log.warn(
        "generation {}: taking another member's state failed ({}); this member "
        "holds none until it takes one whole",
        generation, describe(err));
  after_agreement(self, config, generation, agreed, err);
}

// --zero-stage 1: the members agree on the pieces of the sharded state (piece_agreement.hpp),
// which writes every piece's values into the parameters; their store is lent to the group
// meanwhile (so that a trainer that stops leaves it writing into no freed memory).
void agree_on_shards(self_ptr self, const dp_trainer_config& config, uint64_t generation,
                     std::chrono::milliseconds bound) {
  auto& st = self->state;
  auto& x = *st.shard->pieces;
  x.next = cut_of(*st.job);
  st.shard->borrowed = std::make_shared<bucket_store>(std::move(*st.optimizer));
  st.optimizer.reset();
  x.params = st.params;
  x.params_owner = st.shard->borrowed;
  st.agreeing = true;
  auto over = [=](const sync_result* agreed, const caf::error& err) {
    auto& st = self->state;
    st.agreeing = false;
    st.optimizer = std::move(*st.shard->borrowed);  // (the values stay where they were)
    st.shard->borrowed.reset();
    st.shard->pieces->params_owner.reset();
    bind_params(st);
    after_agreement(self, config, generation, agreed, err);
  };
  self->request(st.group, bound + hand_over_bound(st), sync_atom_v, st.shard->pieces)
      .then([=](const std::shared_ptr<sync_result>& agreed) { over(agreed.get(), {}); },
            [=](caf::error& err) { over(nullptr, err); });
}

// Forms the generation `job` names and agrees on one state with its other members.
void apply_start(self_ptr self, const dp_trainer_config& config, group_start job) {
  auto& st = self->state;
  st.job = std::move(job);
  if (st.shard && (st.resumed || st.resuming || st.resume_failed))  // restored meanwhile
    if (auto err = go_back(st, config))
      return fail(self, config, "going back to the last checkpoint", err);
  st.broken = false;
  st.forming = true;   // no step until the members agree (a run already queued waits)
  size_buffers(st);    // a rate per member; 1-bit errors reset
  st.weights.clear();  // ranks may have moved: every generation starts even
  st.mine_since_sync = st.examples_since_sync = 0;
  if (st.adam && st.job->generation > 1)
    config.log.info("generation {}: 1-bit error feedback reset", st.job->generation);
  auto form = std::make_shared<group_form>();
  form->generation = st.job->generation;
  form->rank = st.job->rank;
  form->size = st.job->size;
  form->token = st.job->token;
  form->key = st.job->group_key;
  form->collective = st.job->collective;
  form->bind_host = config.bind_host;
  form->timeout = std::chrono::milliseconds(st.job->timeout_ms);
  form->coordinator = coordinator_of(config);
  form->hosts = st.job->hosts;
  form->two_level = st.job->two_level;
  const auto generation = st.job->generation;
  const auto bound = 2 * form->timeout + config.request_timeout;
  self->request(st.group, bound, form_atom_v, std::shared_ptr<const group_form>{form})
      .then(
          [=](bool) {
            auto& st = self->state;
            if (st.job->generation != generation) return;
            if (st.shard) return agree_on_shards(self, config, generation, bound);
            auto pieces = std::make_shared<store_pieces>(std::move(st.optimizer), st.store_shapes,
                                                         config.rules);
            st.optimizer.reset();
            st.agreeing = true;
            auto order = std::make_shared<sync_order>(sync_order{st.spoiled ? 0 : st.step, pieces});
            self->request(st.group, bound + hand_over_bound(st), sync_atom_v,
                          std::shared_ptr<const sync_order>{order})
                .then(
                    [=](const std::shared_ptr<sync_result>& agreed) {
                      agreement_over(self, config, generation, *pieces, agreed.get(), {});
                    },
                    [=](caf::error& err) {
                      agreement_over(self, config, generation, *pieces, nullptr, err);
                    });
          },
          [=](caf::error& err) {
            if (self->state.job->generation != generation) return;
            // A backend that cannot be set up here (no GPU for NCCL, a bad layout) will not
            // be set up by trying again.
            if (has_code(err, errc::device_failure) || has_code(err, errc::bad_configuration))
              return fail(self, config, "forming the group", err);
            wait_for_generation(self, config, describe(err));
          });
}

caf::error set_up(dp_trainer_state& st, const dp_trainer_config& config, group_start job) {
  st.layout.emplace(config.task->parameters());
  auto replica = config.task->make_replica(job.global_batch, job.seed);
  if (!replica) return std::move(replica.error());
  st.replica = std::move(*replica);
  if (st.resume_failed) return make_error(errc::corrupt_data, describe(st.resume_failed));
  if (st.resuming || st.restoring_pieces)
    return make_error(errc::corrupt_data, "parts of the checkpoint's state are missing");
  const bool resumed = st.resumed.has_value();
  if (auto err = make_store(st, config, job)) return err;
  auto buckets = gradient_buckets_of(*st.layout, job);
  if (!buckets) return std::move(buckets.error());
  st.buckets = std::move(*buckets);
  find_model_buffers(st);
  if (job.zero_stage > 0)
    if (auto err = make_shard(st, config, job)) return err;
  if (job.zero_stage > 1) make_streamed(st);
  if (st.table_buckets) st.tables = config.task->sparse_tables();  // --mode hybrid
  if (job.compression.adam != compressed_adam::none) {
    if (job.optimizer.type != optimizer_config::kind::adam)
      return make_error(errc::bad_configuration, "1-bit and 0/1 Adam are Adam");
    if (st.model_buffer_values > 0)  // their stages would step the buffers' zero gradients
      return make_error(errc::bad_configuration,
                        "1-bit and 0/1 Adam do not take a model with buffers (BatchNorm's "
                        "statistics) yet");
    st.adam.emplace(*st.layout, st.optimizer_plan.buckets[0], job.compression, job.optimizer);
  }
  st.waiting_for.assign(st.buckets.size(), 0);
  st.examples = config.task->batches_per_epoch(1);
  st.steps_per_epoch = dp_steps_per_epoch(st.examples, job.global_batch);
  if (st.steps_per_epoch == 0)
    return make_error(errc::bad_configuration, "the task has no training examples");
  st.total_steps = st.steps_per_epoch * job.epochs;
  st.job = std::move(job);
  size_buffers(st);
  if (st.adam) st.adam->restart(*st.optimizer);
  if (resumed) {  // a checkpoint's state: we go on from it (the other members from us, by sync)
    st.step = st.restored_step;
    config.log.info("resuming after step {}", st.step);
  }
  return {};
}

// Part `index` of `count` of a checkpoint's state (saved after `step`), which the coordinator
// sends in order before our first start: restored as it comes, never held whole twice.
void take_restore_part(dp_trainer_state& st, const dp_trainer_config& config, uint64_t step,
                       uint32_t index, uint32_t count, const wire& part) {
  auto failed = [&](caf::error err) {
    st.resume_failed = std::move(err);
    st.resuming.reset();
    st.resumed.reset();
  };
  if (index == 0) {
    auto begun = bucket_restorer::begin(part, config.rules);
    if (!begun) return failed(std::move(begun.error()));
    st.resuming.emplace(std::move(*begun));
    st.resumed.reset();
    st.resume_failed = caf::error{};
    st.restored_step = step;
  } else if (st.resume_failed) {
    return;
  } else if (!st.resuming || step != st.restored_step || index != st.resume_next) {
    return failed(make_error(errc::corrupt_data, "the checkpoint's parts came out of order"));
  } else if (auto err = st.resuming->add(part)) {
    return failed(std::move(err));
  }
  st.resume_next = index + 1;
  if (index + 1 < count) return;
  auto done = st.resuming->finish();
  st.resuming.reset();
  if (!done) return failed(std::move(done.error()));
  st.resumed.emplace(std::move(*done));
}

// Part `index` of `count` of a checkpoint's sharded state (after the restore of its
// parameters): part 0 is the start this member will get, whose cut says which pieces it
// holds; every later part is a piece record, kept where it overlaps them.
void take_pieces_part(dp_trainer_state& st, const dp_trainer_config& config, uint64_t step,
                      uint32_t index, uint32_t count, const wire& part) {
  auto failed = [&](caf::error err) {
    if (!st.resume_failed) st.resume_failed = std::move(err);
    st.restoring_pieces.reset();
    st.pieces_restored.reset();
  };
  if (st.resume_failed) return;
  if (index != (index == 0 ? 0 : st.pieces_next) || step != st.restored_step ||
      (index > 0 && !st.restoring_pieces))
    return failed(make_error(errc::corrupt_data, "the checkpoint's pieces came out of order"));
  if (index == 0) {
    auto job = decode<group_start>(part);
    if (!job) return failed(std::move(job.error()));
    const flat_layout layout{config.task->parameters()};
    auto buckets = gradient_buckets_of(layout, *job);
    if (!buckets) return failed(std::move(buckets.error()));
    // (under --zero-stage 0 the member holds every piece: one member's cut)
    const piece_cut cut = job->zero_stage > 0 ? cut_of(*job) : piece_cut{job->generation, 1, 0, 0};
    st.restoring_pieces.emplace(cut, cut_held(bucket_ranges(*buckets), cut, job->optimizer),
                                moments_of(job->optimizer, std::nullopt));
    st.pieces_restored.reset();
  } else if (auto err = st.restoring_pieces->add(part)) {
    return failed(std::move(err));
  }
  st.pieces_next = index + 1;
  if (index + 1 < count) return;
  auto done = std::move(*st.restoring_pieces).finish();
  st.restoring_pieces.reset();
  if (!done) return failed(std::move(done.error()));
  st.pieces_restored.emplace(std::move(*done));
}

void start(self_ptr self, const dp_trainer_config& config, const wire& w) {
  auto job = decode<group_start>(w);
  if (!job) return fail(self, config, "reading the group's start", job.error());
  auto& st = self->state;
  if (!st.job) {
    if (auto err = set_up(st, config, *job)) return fail(self, config, "starting", err);
    st.started = clock_type::now();
    config.log.info("member {} of {} (generation {}), {} gradient buckets", job->rank, job->size,
                    job->generation, st.buckets.size());
    return apply_start(self, config, std::move(*job));
  }
  if (job->generation <= st.job->generation &&
      !(st.pending && job->generation > st.pending->generation))
    return config.log.warn("ignored generation {} (we are in {})", job->generation,
                           st.job->generation);
  if (st.in_step || st.agreeing || !st.evaluation_parts.buckets.empty()) {
    st.pending = std::move(*job);  // formed once the step, agreement or evaluation is done
    return;
  }
  apply_start(self, config, std::move(*job));
}

}  // namespace

}  // namespace dp_parts

dp_worker_actor::behavior_type dp_trainer(dp_worker_actor::stateful_pointer<dp_trainer_state> self,
                                          dp_trainer_config config) {
  using namespace dp_parts;
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.group = self->spawn<caf::detached + caf::linked>(allreduce_group, config.log);
  self->monitor(config.coordinator->handle());
  config.coordinator->subscribe(self->address());
  self->attach_functor([link = config.coordinator, name = config.name] {
    link->activity().forget(name);  // an ended member does nothing the stall report needs
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    if (self->state.stopping || msg.source != config.coordinator->address()) return;
    if (config.coordinator->standby_listed())
      return config.log.warn("lost the coordinator ({}); waiting for its standby",
                             describe(msg.reason));
    fail(self, config, "training", make_error(errc::job_failed, "lost the coordinator"));
  });
  const join_request request{role::worker, config.name, static_cast<uint32_t>(::getpid()),
                             endpoint{}, config.host_label};
  self->request(coordinator_of(config), config.request_timeout, join_atom_v, encode(request),
                caf::actor_cast<dp_worker_actor>(self))
      .then(
          [=](const wire& w) {
            config.coordinator->joined(w);
            config.log.debug("joined the coordinator");
          },
          [=](caf::error& err) { fail(self, config, "joining the coordinator", err); });
  return {
      [=](start_atom, const wire& w) {
        if (!sent_by(self, config.coordinator->address()))
          return config.log.warn("ignored a start that is not from the coordinator");
        start(self, config, w);
      },
      [=](tables_atom, std::vector<bucket_actor> buckets, const std::string& servers) {
        if (!sent_by(self, config.coordinator->address()))
          return config.log.warn("ignored tables that are not from the coordinator");
        connect_table_servers(self, config, servers);
        use_table_buckets(self, config, std::move(buckets));
      },
      [=](stop_atom, const std::string& failure) {
        if (sent_by(self, config.coordinator->address())) config.coordinator->close();
        return stop_on_request(self, config.coordinator->address(), failure, "worker");
      },
      [=](run_atom) {
        if (!sent_by(self, self->address())) return;
        auto& st = self->state;
        if (st.pending) return go_on(self, config, false);
        if (!st.broken && !st.forming) run_step(self, config);
      },
      [=](restore_atom, uint64_t step, uint32_t index, uint32_t count,
          const wire& part) -> caf::result<bool> {
        auto& st = self->state;
        // (after the start: a sharded group going back to its last checkpoint)
        if (!sent_by(self, config.coordinator->address()) || (st.job && !st.shard) || count == 0 ||
            count > (uint32_t{1} << 16) || index >= count) {
          config.log.warn("ignored a restore that is not the coordinator's, or late");
          return make_error(errc::malformed_message, "a restore that is not the coordinator's");
        }
        take_restore_part(st, config, step, index, count, part);  // (a failure shows at start)
        return true;
      },
      [=](pieces_atom, uint64_t step, uint32_t index, uint32_t count,
          const wire& part) -> caf::result<bool> {
        auto& st = self->state;
        if (!sent_by(self, config.coordinator->address()) || (st.job && !st.shard) || count < 2 ||
            count > (uint32_t{1} << 24) || index >= count) {
          config.log.warn("ignored pieces that are not the coordinator's, or late");
          return make_error(errc::malformed_message, "pieces that are not the coordinator's");
        }
        take_pieces_part(st, config, step, index, count, part);  // (a failure shows at start)
        return true;
      },
      [=](tick_atom, uint64_t generation) {
        auto& st = self->state;
        if (!sent_by(self, self->address()) || !st.broken || st.job->generation != generation ||
            st.pending)
          return;
        fail(self, config, "waiting for a new generation of the group",
             make_error(errc::timeout, "the coordinator formed none in time"));
      },
      [=](rejoin_atom, uint64_t term) { rejoin(self, config, term); },
      [=](state_atom, uint64_t reports_through, uint32_t evaluated) {
        if (sent_by(self, config.coordinator->address()))
          drop_held(self->state, reports_through, evaluated);
      },
      [=](save_atom) {
        if (sent_by(self, config.coordinator->address())) self->state.checkpoint_due = true;
      },
      [=](log_atom, const std::string& level) {
        set_level_from(self, config.coordinator->address(), level, config.log);
      },
      [=](usage_atom) -> uint64_t { return current_process_usage().peak_rss_bytes; },
  };
}

}  // namespace troupe
