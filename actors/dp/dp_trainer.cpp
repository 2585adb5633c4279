#include "actors/dp/dp_trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "actors/supervision/guards.hpp"
#include "actors/supervision/node_control.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = dp_worker_actor::stateful_pointer<dp_trainer_state>;
using clock_type = std::chrono::steady_clock;

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void fail(self_ptr self, const dp_trainer_config& config, const std::string& doing,
          const caf::error& err) {
  config.log.error("stopping: {}: {}", doing, describe(err));
  self->quit(make_error(errc::job_failed, doing + ": " + describe(err)));
}

void finish_step(self_ptr self, const dp_trainer_config& config);
void go_on(self_ptr self, const dp_trainer_config& config, bool snapshot);
void step_settled(self_ptr self, const dp_trainer_config& config, const caf::error& err);
void apply_start(self_ptr self, const dp_trainer_config& config, group_start job);

// Values [begin, end) of the step's [meta | gradient] that bucket b reduces: the last
// bucket (the first tensors) also carries the meta.
std::span<float> bucket_values(dp_trainer_state& st, size_t b) {
  const auto& bucket = st.buckets[b];
  const size_t begin = bucket.begin == 0 ? 0 : meta_size + bucket.begin;
  return std::span<float>(*st.values).subspan(begin, meta_size + bucket.end - begin);
}

// Sends bucket b to the group: its gradient weighted by this member's share of the step's
// examples (so that the sum over the members is the step's mean gradient), and a note in the
// meta if any value is not finite.
void send_bucket(self_ptr self, const dp_trainer_config& config, size_t b) {
  auto& st = self->state;
  auto values = bucket_values(st, b);
  const size_t skip = st.buckets[b].begin == 0 ? meta_size : 0;
  const float weight = static_cast<float>(double(st.mine) / double(st.step_examples));
  if (!kernels::scale_within(values.subspan(skip), weight, std::numeric_limits<float>::max()))
    (*st.values)[meta_non_finite] = 1.0f;  // NaN or Inf
  auto order = std::make_shared<reduce_order>(
      reduce_order{values, static_cast<uint32_t>(st.step * st.buckets.size() + b), st.values});
  ++st.replies_due;
  const auto timeout = std::chrono::milliseconds(st.job->timeout_ms) + config.request_timeout;
  self->request(st.group, timeout, reduce_atom_v, std::shared_ptr<const reduce_order>{order})
      .then(
          [=](const reduce_done& done) {
            auto& st = self->state;
            st.step_allreduce_s += done.seconds;
            st.step_bytes += done.bytes;
            st.step_bytes_inter_host += done.bytes_inter_host;
            if (--st.replies_due == 0) step_settled(self, config, caf::error{});
          },
          [=](caf::error& err) {
            auto& st = self->state;
            if (!st.broken) config.log.warn("step {}: {}", st.step + 1, describe(err));
            st.broken = true;
            if (--st.replies_due == 0) step_settled(self, config, err);
          });
}

// Sends, in order, every bucket whose values are all final.
void send_ready(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  while (st.next_bucket < st.buckets.size() && st.waiting_for[st.next_bucket] == 0)
    send_bucket(self, config, st.next_bucket++);
}

// Tensor `tensor` is final (told once per step: a task that tells twice is not counted twice).
void tensor_ready(self_ptr self, const dp_trainer_config& config, size_t tensor) {
  auto& st = self->state;
  if (tensor >= st.tensor_final.size() || st.tensor_final[tensor]) return;
  st.tensor_final[tensor] = true;
  for (size_t b = st.next_bucket; b < st.buckets.size(); ++b)
    for (size_t t : st.buckets[b].tensors)
      if (t == tensor) --st.waiting_for[b];
  if (st.job->overlap) send_ready(self, config);
}

// One step: this member's share of the examples, backward with its buckets sent as they
// become final, then the meta (examples, loss) with the last one.
void run_step(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  const auto& job = *st.job;
  const auto epoch = static_cast<uint32_t>(st.step / st.steps_per_epoch);
  const uint64_t in_epoch = st.step % st.steps_per_epoch;
  const auto share = dp_share(st.examples, job.global_batch, in_epoch, job.size, job.rank);
  st.mine = share.count;
  // Every member computes the step's examples alike: the sum below is their mean gradient.
  st.step_examples =
      std::min<uint64_t>(job.global_batch, st.examples - in_epoch * job.global_batch);
  st.in_step = true;
  st.next_bucket = 0;
  st.replies_due = 0;
  st.step_allreduce_s = 0;
  st.step_bytes = 0;
  st.step_bytes_inter_host = 0;
  for (size_t b = 0; b < st.buckets.size(); ++b)
    st.waiting_for[b] = st.buckets[b].tensors.size() + (b + 1 == st.buckets.size() ? 1 : 0);
  st.tensor_final.assign(st.layout->specs.size(), false);
  std::fill(st.values->begin(), st.values->begin() + meta_size, 0.0f);
  auto grad = std::span<float>(*st.values).subspan(meta_size);
  double loss = 0;
  const auto began = clock_type::now();
  if (share.count == 0) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (size_t t = 0; t < st.layout->specs.size(); ++t) tensor_ready(self, config, t);
  } else {
    auto done = st.replica->gradient_range(st.params, epoch, share.first, share.count, grad,
                                           [&](size_t t) { tensor_ready(self, config, t); });
    if (!done) return fail(self, config, "computing the gradient", done.error());
    if (done->count != share.count)
      return fail(self, config, "computing the gradient",
                  make_error(errc::shape_mismatch, "the task computed another number of examples"));
    loss = done->loss;
    for (size_t t = 0; t < st.layout->specs.size(); ++t) tensor_ready(self, config, t);
  }
  st.backward_done = clock_type::now();
  st.compute_s += seconds_between(began, st.backward_done);
  (*st.values)[meta_examples] = static_cast<float>(st.mine);
  st.own_loss_sum = loss * st.mine;
  (*st.values)[meta_loss] = static_cast<float>(st.own_loss_sum);
  if (!std::isfinite(loss)) (*st.values)[meta_non_finite] = 1.0f;
  --st.waiting_for.back();  // the meta is in
  send_ready(self, config);
}

// Every bucket is summed: step (or skip, when some member's gradient was not finite), report,
// and go on.
void finish_step(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  const double exposed = seconds_between(st.backward_done, clock_type::now());
  const float total = (*st.values)[meta_examples];
  bool skipped = (*st.values)[meta_non_finite] > 0 || !(total > 0);
  if (!skipped && uint64_t(total) != st.step_examples)
    return fail(self, config, "summing the step",
                make_error(errc::collective_failed, "the members disagree on the step's examples"));
  const auto epoch = static_cast<uint32_t>(st.step / st.steps_per_epoch);
  if (skipped) {
    config.log.warn("step {}: a member's gradient is not finite; skipped by every member",
                    st.step + 1);
  } else {
    auto grad = std::span<float>(*st.values).subspan(meta_size);
    const auto& plan = st.optimizer_plan.buckets[0];
    push_request push{0, 0, st.step, vector_clock{}};
    push.dense = gather(*st.layout, plan, grad);
    auto applied = st.optimizer->apply(std::move(push));
    if (applied) {
      scatter(*st.layout, st.optimizer->slices(), st.params);
    } else if (has_code(applied.error(), errc::non_finite)) {
      // Finite gradients whose sum overflowed (or passed the optimizer's bound): every member
      // holds the same bits and refuses alike, leaving the parameters as they were.
      config.log.warn("step {}: the summed gradient is not usable ({}); skipped by every member",
                      st.step + 1, describe(applied.error()));
      skipped = true;
    } else {
      return fail(self, config, "applying the step", applied.error());
    }
  }
  ++st.step;
  const bool last = st.step == st.total_steps;
  const bool compare = last || (st.job->checksum_every && st.step % st.job->checksum_every == 0);
  step_report report{st.job->rank,
                     st.job->generation,
                     epoch,
                     st.step,
                     skipped ? 0.0 : st.own_loss_sum,
                     st.mine,
                     skipped,
                     st.step_allreduce_s,
                     exposed,
                     st.step_bytes,
                     st.compute_s,
                     seconds_between(st.started, clock_type::now()),
                     compare ? std::max<uint64_t>(1, parameter_checksum(st.params)) : 0};
  report.step_examples = static_cast<uint64_t>(total);
  report.bytes_inter_host = st.step_bytes_inter_host;
  self->send(config.coordinator, step_atom_v, encode(report));
  if (st.job->rank == 0 && st.job->checkpoint_every && st.step % st.job->checkpoint_every == 0) {
    const auto parts = st.optimizer->save();
    for (uint32_t i = 0; i < parts.size(); ++i)
      self->send(config.coordinator, save_atom_v, st.step, i, uint32_t(parts.size()), parts[i]);
  }
  st.in_step = false;
  go_on(self, config, true);
}

// After a step (or a new generation's agreement that moved us on): the parameters after an
// epoch go to the coordinator for evaluation (every member sends them; it keeps the first),
// then a new generation that arrived meanwhile is formed, or the next step runs, or done is
// said after the last.
void go_on(self_ptr self, const dp_trainer_config& config, bool snapshot) {
  auto& st = self->state;
  if (snapshot && st.step > 0 && st.step % st.steps_per_epoch == 0) {
    const auto epoch = static_cast<uint32_t>(st.step / st.steps_per_epoch - 1);
    pull_reply parameters{0, st.step, vector_clock{}, st.optimizer->slices(), {}};
    self->send(config.coordinator, eval_atom_v, epoch, encode(parameters));
  }
  if (st.pending) {
    auto next = std::move(*st.pending);
    st.pending.reset();
    return apply_start(self, config, std::move(next));
  }
  if (st.step >= st.total_steps) {
    config.log.info("trained {} steps", st.step);
    self->send(config.coordinator, done_atom_v, st.job->rank);
    return;
  }
  self->send(self, run_atom_v);
}

// A collective of this generation failed: the step is abandoned (nothing was applied) and
// the coordinator told; it forms a new generation, within a bound.
void wait_for_generation(self_ptr self, const dp_trainer_config& config, const std::string& why) {
  auto& st = self->state;
  st.in_step = false;
  st.broken = true;
  if (st.pending) return go_on(self, config, false);
  self->send(config.coordinator, broken_atom_v, st.job->generation, why);
  const auto bound = std::chrono::milliseconds(3 * st.job->timeout_ms) + 2 * config.request_timeout;
  self->delayed_send(self, bound, tick_atom_v, st.job->generation);
}

void step_settled(self_ptr self, const dp_trainer_config& config, const caf::error& err) {
  if (!self->state.broken) return finish_step(self, config);
  wait_for_generation(self, config, describe(err));
}

// Our whole state as bytes: bucket_store::save()'s messages, each after its length.
std::vector<char> pack_state(const bucket_store& store) {
  std::vector<char> out;
  for (const auto& w : store.save()) {
    const uint64_t n = w.bytes.size();
    const auto* p = reinterpret_cast<const char*>(&n);
    out.insert(out.end(), p, p + sizeof n);
    out.insert(out.end(), w.bytes.begin(), w.bytes.end());
  }
  return out;
}

caf::expected<bucket_store> unpack_state(const std::vector<char>& bytes,
                                         const update_rules& rules) {
  std::vector<wire> saved;
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t n = 0;
    if (bytes.size() - at < sizeof n) return make_error(errc::corrupt_data, "state: cut short");
    std::memcpy(&n, bytes.data() + at, sizeof n);
    at += sizeof n;
    if (n > bytes.size() - at) return make_error(errc::corrupt_data, "state: cut short");
    saved.push_back(wire{std::vector<char>(bytes.begin() + at, bytes.begin() + at + n)});
    at += n;
  }
  return bucket_store::restore(saved, rules);
}

// The new generation is formed: go on from the state the members agreed on.
void synced(self_ptr self, const dp_trainer_config& config, const sync_result& agreed) {
  auto& st = self->state;
  if (!agreed.state.empty()) {
    auto restored = unpack_state(agreed.state, config.rules);
    if (!restored) return fail(self, config, "taking over a member's state", restored.error());
    if (restored->slices().size() != st.optimizer->slices().size())
      return fail(self, config, "taking over a member's state",
                  make_error(errc::shape_mismatch, "another model"));
    st.optimizer.emplace(std::move(*restored));
    scatter(*st.layout, st.optimizer->slices(), st.params);
  }
  const bool moved = agreed.steps != st.step;
  if (moved || st.job->generation > 1)
    config.log.info("generation {}: member {} of {}, going on after step {} (member {}'s state)",
                    st.job->generation, st.job->rank, st.job->size, agreed.steps, agreed.source);
  st.step = agreed.steps;
  st.broken = false;
  go_on(self, config, moved);
}

// Forms the generation `job` names and agrees on one state with its other members.
void apply_start(self_ptr self, const dp_trainer_config& config, group_start job) {
  auto& st = self->state;
  st.job = std::move(job);
  st.broken = false;
  auto form = std::make_shared<group_form>();
  form->generation = st.job->generation;
  form->rank = st.job->rank;
  form->size = st.job->size;
  form->token = st.job->token;
  form->key = st.job->group_key;
  form->collective = st.job->collective;
  form->bind_host = config.bind_host;
  form->timeout = std::chrono::milliseconds(st.job->timeout_ms);
  form->coordinator = config.coordinator;
  form->hosts = st.job->hosts;
  form->two_level = st.job->two_level;
  const auto generation = st.job->generation;
  const auto bound = 2 * form->timeout + config.request_timeout;
  self->request(st.group, bound, form_atom_v, std::shared_ptr<const group_form>{form})
      .then(
          [=](bool) {
            auto& st = self->state;
            if (st.job->generation != generation) return;
            auto order =
                std::make_shared<sync_order>(sync_order{st.step, pack_state(*st.optimizer)});
            self->request(st.group, bound, sync_atom_v, std::shared_ptr<const sync_order>{order})
                .then(
                    [=](const std::shared_ptr<sync_result>& agreed) {
                      if (self->state.job->generation == generation) synced(self, config, *agreed);
                    },
                    [=](caf::error& err) {
                      if (self->state.job->generation == generation)
                        wait_for_generation(self, config, describe(err));
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
  st.params.assign(st.layout->total, 0.0f);
  config.task->initialize(job.seed, st.params);
  st.optimizer_plan = plan_buckets(*st.layout, 1, 1);
  if (auto err = check_rule(job.optimizer, config.rules)) return err;
  bucket_spec spec{0, 1, job.optimizer,
                   gather(*st.layout, st.optimizer_plan.buckets[0], st.params)};
  st.optimizer.emplace(std::move(spec), config.rules);
  st.values = std::make_shared<std::vector<float>>(meta_size + st.layout->total, 0.0f);
  st.buckets = plan_gradient_buckets(*st.layout, job.bucket_bytes);
  st.waiting_for.assign(st.buckets.size(), 0);
  st.examples = config.task->batches_per_epoch(1);
  st.steps_per_epoch = dp_steps_per_epoch(st.examples, job.global_batch);
  if (st.steps_per_epoch == 0)
    return make_error(errc::bad_configuration, "the task has no training examples");
  st.total_steps = st.steps_per_epoch * job.epochs;
  st.job = std::move(job);
  return {};
}

// A checkpoint's state the coordinator sent before our first start: we go on from it (the
// other members from us, through sync).
caf::error take_restored(dp_trainer_state& st, const dp_trainer_config& config) {
  if (st.restored.empty()) return {};
  if (std::any_of(st.restored.begin(), st.restored.end(),
                  [](const wire& w) { return w.bytes.empty(); }))
    return make_error(errc::corrupt_data, "parts of the checkpoint's state are missing");
  auto restored = bucket_store::restore(st.restored, config.rules);
  st.restored.clear();
  if (!restored) return std::move(restored.error());
  if (restored->slices().size() != st.optimizer->slices().size())
    return make_error(errc::shape_mismatch, "the checkpoint holds another model");
  st.optimizer.emplace(std::move(*restored));
  scatter(*st.layout, st.optimizer->slices(), st.params);
  st.step = st.restored_step;
  config.log.info("resuming after step {}", st.step);
  return {};
}

void start(self_ptr self, const dp_trainer_config& config, const wire& w) {
  auto job = decode<group_start>(w);
  if (!job) return fail(self, config, "reading the group's start", job.error());
  auto& st = self->state;
  if (!st.job) {
    if (auto err = set_up(st, config, *job)) return fail(self, config, "starting", err);
    if (auto err = take_restored(st, config)) return fail(self, config, "resuming", err);
    st.started = clock_type::now();
    config.log.info("member {} of {} (generation {}), {} gradient buckets", job->rank, job->size,
                    job->generation, st.buckets.size());
    return apply_start(self, config, std::move(*job));
  }
  if (job->generation <= st.job->generation &&
      !(st.pending && job->generation > st.pending->generation))
    return config.log.warn("ignored generation {} (we are in {})", job->generation,
                           st.job->generation);
  if (st.in_step) {
    st.pending = std::move(*job);  // formed once the step in flight settles
    return;
  }
  apply_start(self, config, std::move(*job));
}

}  // namespace

dp_worker_actor::behavior_type dp_trainer(dp_worker_actor::stateful_pointer<dp_trainer_state> self,
                                          dp_trainer_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.group = self->spawn<caf::detached + caf::linked>(allreduce_group, config.log);
  self->monitor(config.coordinator);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (self->state.stopping || msg.source != config.coordinator.address()) return;
    fail(self, config, "training", make_error(errc::job_failed, "lost the coordinator"));
  });
  const join_request request{role::worker, config.name, static_cast<uint32_t>(::getpid()),
                             endpoint{}, config.host_label};
  self->request(config.coordinator, config.request_timeout, join_atom_v, encode(request),
                caf::actor_cast<dp_worker_actor>(self))
      .then([=](const wire&) { config.log.debug("joined the coordinator"); },
            [=](caf::error& err) { fail(self, config, "joining the coordinator", err); });
  return {
      [=](start_atom, const wire& w) {
        if (!sent_by(self, config.coordinator.address()))
          return config.log.warn("ignored a start that is not from the coordinator");
        start(self, config, w);
      },
      [=](stop_atom, const std::string& failure) {
        return stop_on_request(self, config.coordinator.address(), failure, "worker");
      },
      [=](run_atom) {
        if (!sent_by(self, self->address())) return;
        auto& st = self->state;
        if (st.pending) return go_on(self, config, false);
        if (!st.broken) run_step(self, config);
      },
      [=](restore_atom, uint64_t step, uint32_t index, uint32_t count, const wire& part) {
        auto& st = self->state;
        if (!sent_by(self, config.coordinator.address()) || st.job || count == 0 || count > 4096 ||
            index >= count)
          return config.log.warn("ignored a restore that is not the coordinator's, or late");
        st.restored.resize(count);
        st.restored[index] = part;
        st.restored_step = step;
      },
      [=](tick_atom, uint64_t generation) {
        auto& st = self->state;
        if (!sent_by(self, self->address()) || !st.broken || st.job->generation != generation ||
            st.pending)
          return;
        fail(self, config, "waiting for a new generation of the group",
             make_error(errc::timeout, "the coordinator formed none in time"));
      },
  };
}

}  // namespace troupe
