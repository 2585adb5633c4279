// The dp_trainer's steps: the member's share of the step's examples (in micro-batches under
// --accumulate, slowed under --worker-slowdown), its buckets sent to the group as backward
// finishes them (packed as --comm-dtype or the 1-bit stages say), and the summed result
// applied alike by every member.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

namespace {

void settle_step(self_ptr self, const dp_trainer_config& config);

using clock_type = std::chrono::steady_clock;
using kernels::wire_codec;

// --balance: steps between two re-estimates of the shares, and the least weight, against the
// largest, a slow member keeps (so that its speed can still be measured).
constexpr uint64_t rebalance_every = 4;
constexpr double least_weight = 0.05;

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void finish_step(self_ptr self, const dp_trainer_config& config);
void compute_and_send(self_ptr self, const dp_trainer_config& config, example_range share,
                      uint32_t epoch);

// Values [begin, end) of the step's [meta | gradient] that bucket b reduces: the last
// bucket (the first tensors) also carries the meta, unless the sum is sharded (the meta then
// goes alone, once every bucket is summed: send_meta).
std::span<float> bucket_values(dp_trainer_state& st, size_t b) {
  if (st.shard && st.shard->streamed) return streamed_bucket(st, b);
  const auto& bucket = st.buckets[b];
  const size_t begin = bucket.begin == 0 && !st.shard ? 0 : st.meta_len + bucket.begin;
  return std::span<float>(*st.values).subspan(begin, st.meta_len + bucket.end - begin);
}

wire_codec codec_for(const dp_trainer_state& st, const gradient_bucket& bucket) {
  if (bucket.full_precision) return wire_codec::fp32;
  if (st.stage == adam_stage::momentum || st.stage == adam_stage::sync) return wire_codec::onebit;
  switch (st.job->compression.dtype) {
    case comm_dtype::bf16:
      return wire_codec::bf16;
    case comm_dtype::fp16:
      return wire_codec::fp16;
    case comm_dtype::fp32:
    case comm_dtype::int8:  // --mode diloco's alone: the options refuse it here
      break;
  }
  return wire_codec::fp32;
}

void send_meta(self_ptr self, const dp_trainer_config& config);
void step_done(self_ptr self, const dp_trainer_config& config);

// Every order of the step sent so far is answered: the step goes on to its next phase.
void step_settled(self_ptr self, const dp_trainer_config& config, const caf::error& err) {
  auto& st = self->state;
  using phase = sharded_state::phase;
  const bool gathered = st.shard && st.shard->now == phase::gathering;
  if (gathered) {  // the parameters' store comes back, whatever the gather did
    st.optimizer = std::move(*st.shard->borrowed);  // (the values stay where they were)
    st.shard->borrowed.reset();
  }
  if (st.broken) return wait_for_generation(self, config, describe(err));
  if (!st.shard) return finish_step(self, config);
  if (gathered) return step_done(self, config);
  if (st.shard->now == phase::reducing) return send_meta(self, config);
  finish_step(self, config);
}

// Sends one order of the step to the group; the last answer settles the phase.
void send_order(self_ptr self, const dp_trainer_config& config,
                std::shared_ptr<const reduce_order> order) {
  auto& st = self->state;
  ++st.replies_due;
  const auto timeout = std::chrono::milliseconds(st.job->timeout_ms) + config.request_timeout;
  self->request(st.group, timeout, reduce_atom_v, std::move(order))
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

// The collective tag of the step's order `k` (every member the same): per step, its buckets'
// sums, the meta's, and (sharded) the buckets' gathers.
uint32_t tag_of(const dp_trainer_state& st, size_t k) {
  return static_cast<uint32_t>(st.step * (2 * st.buckets.size() + 1) + k);
}

// Sends bucket b to the group: its gradient weighted by this member's share of the step's
// examples (so that the sum over the members is the step's mean gradient), prepared for the
// stage of 1-bit / 0/1 Adam, and a note in the meta if any value is not finite. (A sync step
// of 0/1 Adam sends the weighted accumulated update instead, already in place.)
void send_bucket(self_ptr self, const dp_trainer_config& config, size_t b) {
  auto& st = self->state;
  const auto& bucket = st.buckets[b];
  auto values = bucket_values(st, b);
  const size_t plain = bucket.begin == 0 && !st.shard ? st.meta_len : 0;  // (the meta)
  if (st.stage != adam_stage::sync) {
    const float weight = static_cast<float>(double(st.mine) / double(st.step_examples));
    auto grad = values.subspan(plain);
    if (!kernels::scale_within(grad, weight, std::numeric_limits<float>::max())) {
      // NaN or Inf: every member skips the step; zeros travel instead, so that no error
      // feedback (1-bit) takes the non-finite values in and keeps them.
      (*st.values)[meta_non_finite] = 1.0f;
      st.own_non_finite = true;
      std::fill(grad.begin(), grad.end(), 0.0f);
    } else if (st.adam)
      st.adam->prepare(st.stage, grad, bucket.begin, weight, *st.optimizer);
  }
  auto order = std::make_shared<reduce_order>();
  order->data = values;
  order->tag = tag_of(st, b);
  order->owner = std::make_shared<
      std::pair<std::shared_ptr<std::vector<float>>, std::shared_ptr<feedback_buffers>>>(
      st.values, st.feedback);
  order->codec = codec_for(st, bucket);
  order->plain = plain;
  if (st.shard) {  // the sums of the pieces we hold, in place
    order->op = reduce_op::reduce_scatter;
    order->copies = static_cast<uint32_t>(st.shard->pieces->held.size());
    if (st.shard->streamed) hand_over_bucket(st, b, *order);
  }
  if (order->codec == wire_codec::onebit) {
    auto& f = *st.feedback;
    const size_t n = bucket.end - bucket.begin;
    order->errors.worker = std::span<float>(f.worker).subspan(bucket.begin, n);
    order->errors.server =
        std::span<float>(f.server).subspan(f.server_offsets[b], compressed_chunk(n, st.job->size));
  }
  send_order(self, config, std::move(order));
}

// A sharded sum (--zero-stage 1): once every bucket's pieces are summed, the meta goes alone,
// with this member's word on its pieces' sum (refused when not usable, so that every member
// skips the step alike).
void send_meta(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  st.shard->now = sharded_state::phase::meta;
  st.shard->pieces->summed_step = st.shard->computed_step = st.step + 1;
  if (!shard_sum_usable(st)) (*st.values)[meta_refused] = 1.0f;
  auto order = std::make_shared<reduce_order>();
  order->data = std::span<float>(*st.values).first(st.meta_len);
  order->tag = tag_of(st, st.buckets.size());
  order->owner = st.values;
  order->plain = st.meta_len;
  send_order(self, config, std::move(order));
}

// A sharded step, bucket by bucket: this member steps the pieces it holds (in the parameters),
// then every member's pieces go to every member, while it steps the next bucket's. The
// parameters' store is lent to the orders meanwhile, so that a trainer that stops leaves none
// writing into freed memory.
void step_and_gather(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  auto& shard = *st.shard;
  shard.now = sharded_state::phase::gathering;
  shard.borrowed = std::make_shared<bucket_store>(std::move(*st.optimizer));
  st.optimizer.reset();
  for (size_t b = 0; b < st.buckets.size(); ++b) {
    step_shard_bucket(st, b);
    const auto& bucket = st.buckets[b];
    auto order = std::make_shared<reduce_order>();
    order->data = st.params.subspan(bucket.begin, bucket.end - bucket.begin);
    order->tag = tag_of(st, st.buckets.size() + 1 + b);
    order->owner = shard.borrowed;
    order->op = reduce_op::all_gather;
    send_order(self, config, std::move(order));
  }
  ++shard.pieces->version;
}

// Sends, in order, every bucket whose values are all final.
void send_ready(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  while (st.next_bucket < st.buckets.size() && st.waiting_for[st.next_bucket] == 0)
    send_bucket(self, config, st.next_bucket++);
}

// Whether buckets go out while backward still runs: not in 0/1 Adam's local stages, whose
// step needs the whole gradient first.
bool sends_during_backward(const dp_trainer_state& st) {
  return st.job->overlap && (st.stage == adam_stage::full || st.stage == adam_stage::momentum);
}

// Tensor `tensor` is final (told once per step: a task that tells twice is not counted twice).
void tensor_ready(self_ptr self, const dp_trainer_config& config, size_t tensor) {
  auto& st = self->state;
  if (tensor >= st.tensor_final.size() || st.tensor_final[tensor]) return;
  st.tensor_final[tensor] = true;
  for (size_t b = st.next_bucket; b < st.buckets.size(); ++b)
    for (size_t t : st.buckets[b].tensors)
      if (t == tensor) --st.waiting_for[b];
  if (sends_during_backward(st)) send_ready(self, config);
}

// The mean gradient of this member's share into `grad`, in --accumulate micro-batches
// averaged by their sizes; tensors are told final as the last micro-batch finishes them.
// Returns the share's mean loss.
caf::expected<double> share_gradient(self_ptr self, const dp_trainer_config& config,
                                     example_range share, uint32_t epoch, std::span<float> grad) {
  auto& st = self->state;
  const auto& layout = *st.layout;
  const auto sizes = micro_batches(share.count, st.job->accumulate);
  // A buffer's value is final only once it has left the gradient (compute_and_send).
  auto tell = [&](size_t t) {
    if (t < st.is_model_buffer.size() && !st.is_model_buffer[t]) tensor_ready(self, config, t);
  };
  if (!st.tables.empty()) {  // --mode hybrid: with the rows pulled for the share
    auto done =
        st.replica->gradient_range(st.params, st.rows, epoch, share.first, share.count, grad);
    if (!done) return std::move(done.error());
    if (done->count != share.count)
      return make_error(errc::shape_mismatch, "the task computed another number of examples");
    return done->loss;
  }
  if (sizes.size() <= 1) {
    auto done = st.replica->gradient_range(st.params, epoch, share.first, share.count, grad, tell);
    if (!done) return std::move(done.error());
    if (done->count != share.count)
      return make_error(errc::shape_mismatch, "the task computed another number of examples");
    return done->loss;
  }
  std::fill(grad.begin(), grad.end(), 0.0f);
  st.micro.resize(layout.total);  // each micro-batch overwrites it
  std::vector<bool> added(layout.specs.size(), false);
  double loss = 0;
  uint64_t first = share.first;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const float weight = static_cast<float>(double(sizes[k]) / double(share.count));
    const bool last = k + 1 == sizes.size();
    // Tensor t of this micro-batch into the mean; a model buffer's new value is the next
    // micro-batch's start (its statistics move once per forward pass, as under DDP's
    // no_sync), and the last one's is the share's.
    auto add = [&](size_t t) {
      if (t >= added.size() || added[t]) return;
      added[t] = true;
      const uint64_t end = t + 1 < added.size() ? layout.offsets[t + 1] : layout.total;
      if (st.is_model_buffer[t]) {
        std::copy(st.micro.begin() + layout.offsets[t], st.micro.begin() + end,
                  grad.begin() + layout.offsets[t]);
        std::copy(st.micro.begin() + layout.offsets[t], st.micro.begin() + end,
                  st.params.begin() + layout.offsets[t]);
      } else {
        for (uint64_t i = layout.offsets[t]; i < end; ++i) grad[i] += weight * st.micro[i];
      }
      if (last) tell(t);
    };
    auto done = st.replica->gradient_range(st.params, epoch, first, sizes[k], st.micro, add);
    if (!done) return std::move(done.error());
    if (done->count != sizes[k])
      return make_error(errc::shape_mismatch, "the task computed another number of examples");
    for (size_t t = 0; t < layout.specs.size(); ++t) add(t);
    if (!last) added.assign(layout.specs.size(), false);
    loss += done->loss * double(sizes[k]);
    first += sizes[k];
  }
  return loss / double(share.count);
}

// This member's share of the step: even, or (--balance, once weighed) by the members' weights.
example_range my_share(const dp_trainer_state& st, uint64_t in_epoch) {
  const auto& job = *st.job;
  if (st.weights.size() != job.size)
    return dp_share(st.examples, job.global_batch, in_epoch, job.size, job.rank);
  return dp_weighted_share(st.examples, job.global_batch, in_epoch, st.weights, job.rank);
}

// --worker-slowdown: this member takes F times as long per example as it did; --worker-delay-ms:
// D ms more per step.
void slow_down(const dp_trainer_state& st, double computed_s) {
  if (st.job->slowdown > 1 && computed_s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>((st.job->slowdown - 1) * computed_s));
  if (st.job->delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(st.job->delay_ms));
}

// The stage of the step in flight, and what it resets: 0/1 Adam's errors change meaning from
// momentum to accumulated update when the variance freezes.
void enter_stage(self_ptr self, const dp_trainer_config& config, bool epoch_end) {
  auto& st = self->state;
  const auto& c = st.job->compression;
  st.stage = st.adam ? stage_of(c, st.step + 1, epoch_end) : adam_stage::full;
  if (c.adam == compressed_adam::zero_one && st.step == c.var_freeze_step) {
    config.log.info("step {}: variance frozen; local steps from now on, error feedback reset",
                    st.step + 1);
    size_buffers(st);
    st.adam->restart(*st.optimizer);
  }
}

}  // namespace

// One step: this member's share of the examples, backward with its buckets sent as they
// become final, then the meta (examples, loss, step time) with the last one.
void run_step(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  const auto& job = *st.job;
  const auto epoch = static_cast<uint32_t>(st.step / st.steps_per_epoch);
  const uint64_t in_epoch = st.step % st.steps_per_epoch;
  enter_stage(self, config, in_epoch + 1 == st.steps_per_epoch);
  const auto share = my_share(st, in_epoch);
  st.mine = share.count;
  // Every member computes the step's examples alike: the sum below is their mean gradient.
  st.step_examples =
      std::min<uint64_t>(job.global_batch, st.examples - in_epoch * job.global_batch);
  st.in_step = true;
  st.own_non_finite = false;
  st.rows_due.clear();
  st.next_bucket = 0;
  st.replies_due = 0;
  st.step_allreduce_s = 0;
  st.step_bytes = 0;
  st.step_bytes_inter_host = 0;
  const bool meta_in_last = !st.shard;  // (a sharded sum sends the meta alone)
  for (size_t b = 0; b < st.buckets.size(); ++b)
    st.waiting_for[b] =
        st.buckets[b].tensors.size() + (meta_in_last && b + 1 == st.buckets.size() ? 1 : 0);
  if (st.shard) st.shard->now = sharded_state::phase::reducing;
  st.tensor_final.assign(st.layout->specs.size(), false);
  std::fill(st.values->begin(), st.values->begin() + st.meta_len, 0.0f);
  if (!st.tables.empty() && share.count > 0)  // --mode hybrid: the share's rows first
    return pull_share_rows(self, config, share, epoch,
                           [=] { compute_and_send(self, config, share, epoch); });
  compute_and_send(self, config, share, epoch);
}

namespace {

// The share's gradient (and, in hybrid jobs, its rows' pushes, sent once the step is applied),
// then the buckets to the group.
void compute_and_send(self_ptr self, const dp_trainer_config& config, example_range share,
                      uint32_t epoch) {
  auto& st = self->state;
  const auto& job = *st.job;
  auto grad = std::span<float>(*st.values).subspan(st.meta_len);
  double loss = 0;
  const auto began = clock_type::now();
  if (st.shard && st.shard->streamed) {  // (--zero-stage 2: no whole gradient)
    config.coordinator->activity().set(config.name, fmt::format("step {}", st.step + 1),
                                       "user code: gradient");
    auto done = streamed_share_gradient(self, config, share, epoch,
                                        [=](size_t t) { tensor_ready(self, config, t); });
    if (!done) return fail(self, config, "computing the gradient", done.error());
    loss = *done;
  } else if (share.count == 0) {
    std::fill(grad.begin(), grad.end(), 0.0f);
  } else {
    config.coordinator->activity().set(config.name, fmt::format("step {}", st.step + 1),
                                       "user code: gradient");
    auto done = share_gradient(self, config, share, epoch, grad);
    if (!done) return fail(self, config, "computing the gradient", done.error());
    loss = *done;
  }
  slow_down(st, seconds_between(began, clock_type::now()));
  const bool buffers_finite = send_model_buffers(st, grad, share.count > 0);
  if (!buffers_finite || !std::isfinite(loss)) st.own_non_finite = true;
  if (st.own_non_finite) (*st.values)[meta_non_finite] = 1.0f;
  if (!st.tables.empty() && share.count > 0) prepare_share_rows(st, share, epoch);
  for (size_t t = 0; t < st.layout->specs.size(); ++t) tensor_ready(self, config, t);
  st.backward_done = clock_type::now();
  const double took = seconds_between(began, st.backward_done);
  st.compute_s += took;
  st.own_seconds = st.own_seconds > 0 ? 0.5 * st.own_seconds + 0.5 * took : took;
  (*st.values)[meta_examples] = static_cast<float>(st.mine);
  st.own_loss_sum = loss * st.mine;
  (*st.values)[meta_loss] = static_cast<float>(st.own_loss_sum);
  (*st.values)[meta_size + job.rank] = static_cast<float>(st.own_seconds);
  if (st.shard && job.rank == 0 && st.checkpoint_due) (*st.values)[meta_checkpoint] = 1.0f;
  config.coordinator->activity().set(config.name, fmt::format("step {}", st.step + 1),
                                     "collective");
  st.mine_since_sync += st.mine;
  st.examples_since_sync += st.step_examples;
  if (st.stage == adam_stage::local || st.stage == adam_stage::sync) {
    // A sync step's own local step only adds to the accumulated update (the mean replaces the
    // parameters and momentum), so a sync that fails leaves the state as it was.
    const bool in_place = st.stage == adam_stage::local;
    if (auto err = st.adam->local_step(st.step + 1, grad, *st.optimizer, in_place))
      config.log.warn("step {}: {}; this member skips its local step", st.step + 1, describe(err));
    if (st.stage == adam_stage::local) return finish_step(self, config);
    st.adam->accumulated(
        grad, static_cast<float>(double(st.mine_since_sync) / double(st.examples_since_sync)));
  }
  if (!st.shard) --st.waiting_for.back();  // the meta is in
  send_ready(self, config);
}

// --balance: every few steps the members reweigh their shares from the step times they
// summed (the same bits on every one, so every one computes the same weights): each weight is
// scaled by sqrt(mean time / its time), so that the members come to finish their shares
// together, whatever part of a step's time does not grow with its examples.
void reweigh(dp_trainer_state& st) {
  if (!st.job->balance || (st.step + 1) % rebalance_every != 0) return;
  const uint32_t n = st.job->size;
  std::vector<double> seconds;
  double mean = 0;
  for (uint32_t r = 0; r < n; ++r) {
    seconds.push_back((*st.values)[meta_size + r]);
    mean += seconds.back() / n;
  }
  if (!std::all_of(seconds.begin(), seconds.end(), [](double s) { return s > 0; })) return;
  if (st.weights.size() != n) st.weights.assign(n, 1.0);
  double largest = 0;
  for (uint32_t r = 0; r < n; ++r) {
    st.weights[r] *= std::sqrt(mean / seconds[r]);
    largest = std::max(largest, st.weights[r]);
  }
  for (auto& w : st.weights) w = std::max(w / largest, least_weight);
}

// Applies the step's sum: the one-bucket store's optimizer, or 1-bit / 0/1 Adam's stage.
// errc::non_finite when every member refuses it alike.
caf::error apply_sum(dp_trainer_state& st) {
  if (st.shard) return {};  // (stepped bucket by bucket as the gather goes: step_and_gather)
  auto grad = std::span<float>(*st.values).subspan(st.meta_len);
  if (st.adam) {
    if (st.stage == adam_stage::local) return {};
    if (st.stage == adam_stage::sync) {
      st.mine_since_sync = st.examples_since_sync = 0;
      return st.adam->adopt(st.step + 1, grad, *st.optimizer);
    }
    return st.adam->apply(st.stage, st.step + 1, grad, *st.optimizer);
  }
  return step_store(st, grad);
}

// How many request timeouts member 0 gives the last part of a checkpoint in --mode hybrid: the
// coordinator answers it once the tables' buckets are saved too (the coordinator itself gives
// up sooner, so that no step of this member's can reach the tables before their save ends).
constexpr int tables_save_timeouts = 10;

// Part `index` of a checkpoint after this step (`parts`, st.checkpoint_parts for member 0's
// state, or st.checkpoint_pieces for this member's own pieces, each made now) to the
// coordinator, the next once it has written this one: one part in flight, and no step
// meanwhile. Then `then`; after a failure, neither list is sent on.
template <class Atom>
void send_checkpoint_part(self_ptr self, const dp_trainer_config& config, Atom atom,
                          std::vector<std::function<wire()>> dp_trainer_state::*parts, size_t index,
                          std::function<void()> then) {
  auto& st = self->state;
  auto& list = st.*parts;
  if (index >= list.size()) {
    list.clear();
    return then();
  }
  const bool last = index + 1 == list.size();
  const auto i = static_cast<uint32_t>(index);
  // The part that ends the file for this member: its state's last, or with sharded state
  // member 0's last piece.
  const bool ends =
      last && (!st.shard || (st.job->rank == 0 && parts == &dp_trainer_state::checkpoint_pieces));
  const auto bound = ends && !st.tables.empty() ? config.request_timeout * tables_save_timeouts
                                                : config.request_timeout;
  self->request(coordinator_of(config), bound, atom, st.step, i, last ? i + 1 : uint32_t{0},
                list[index]())
      .then([=](bool) { send_checkpoint_part(self, config, atom, parts, index + 1, then); },
            [=](caf::error& err) {
              config.log.warn("checkpoint after step {} not sent: {}", self->state.step,
                              describe(err));
              self->state.checkpoint_parts.clear();
              self->state.checkpoint_pieces.clear();
              then();
            });
}

// Member 0's state (its parameters alone with sharded state), then this member's own pieces.
void send_checkpoint(self_ptr self, const dp_trainer_config& config, std::function<void()> then) {
  send_checkpoint_part(self, config, save_atom_v, &dp_trainer_state::checkpoint_parts, 0, [=] {
    send_checkpoint_part(self, config, pieces_atom_v, &dp_trainer_state::checkpoint_pieces, 0,
                         then);
  });
}

// Every bucket is summed (or, in a local step, none was sent): step (or skip, when some
// member's gradient was not finite); a sharded step then gathers the parameters.
void finish_step(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  const bool local = st.stage == adam_stage::local;
  const float total = local ? float(st.step_examples) : (*st.values)[meta_examples];
  // A sync step goes on whatever one member's gradient was: each sent its finite update.
  bool skipped =
      !(total > 0) || ((*st.values)[meta_non_finite] > 0 && st.stage != adam_stage::sync);
  if (!skipped && uint64_t(total) != st.step_examples)
    return fail(self, config, "summing the step",
                make_error(errc::collective_failed, "the members disagree on the step's examples"));
  if (!local) reweigh(st);
  if (!skipped && (*st.values)[meta_refused] > 0) {
    config.log.warn(
        "step {}: a piece of the summed gradient is not usable (not finite, or above {}); "
        "skipped by every member",
        st.step + 1, max_abs_gradient);
    skipped = true;
  } else if (skipped) {
    if (const uint64_t n = st.skip_warning.count(clock_type::now()))
      config.log.warn(
          "step {}: a member's loss or gradient is not finite{}; skipped by every member "
          "(skipped steps since the last warning: {})",
          st.step + 1, st.own_non_finite ? " (this member's)" : "", n);
  } else if (auto err = apply_sum(st)) {
    // (A sharded sum was checked alike by every member first: a refusal now is this one's.)
    if (!has_code(err, errc::non_finite) || st.shard)
      return fail(self, config, "applying the step", err);
    // Finite gradients whose sum overflowed (or passed the optimizer's bound): every member
    // holds the same bits and refuses alike, leaving the parameters as they were.
    config.log.warn("step {}: the summed gradient is not usable ({}); skipped by every member",
                    st.step + 1, describe(err));
    skipped = true;
  }
  st.step_skipped = skipped;
  if (st.shard) st.shard->save_asked = (*st.values)[meta_checkpoint] > 0;
  if (st.shard) took_step(st, !skipped);
  if (st.shard && !skipped) return step_and_gather(self, config);  // then step_done
  step_done(self, config);
}

// The step is applied (or skipped) on every member: report it and go on.
void step_done(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  const double exposed = seconds_between(st.backward_done, clock_type::now());
  const bool local = st.stage == adam_stage::local;
  const bool skipped = st.step_skipped;
  if (!st.flat_store) bind_params(st);  // the task reads a flat copy of a store per tensor
  if (!skipped && !local) adopt_model_buffers(st);
  ++st.step;
  if (!st.rows_due.empty()) push_share_rows(self, config, skipped);  // the step is applied
  const bool last = st.step == st.total_steps;
  const bool compare =
      !local && (last || (st.job->checksum_every && st.step % st.job->checksum_every == 0));
  const uint64_t checksum = compare ? std::max<uint64_t>(1, parameter_checksum(st.params)) : 0;
  st.report_due.emplace(st.step, encode(report_of(st, skipped, exposed, checksum)));
  const bool scheduled = st.job->checkpoint_every && st.step % st.job->checkpoint_every == 0;
  if (st.shard) {  // every member saves its pieces after the same step
    if (scheduled || st.shard->save_asked) plan_sharded_checkpoint(st);
    if (st.shard->save_asked && st.job->rank == 0) st.checkpoint_due = false;
    st.shard->save_asked = false;
  } else if (scheduled) {
    st.checkpoint_due = true;
  }
  // Not after a local step of 0/1 Adam: that state is one member's (the next sync is).
  if (st.job->rank == 0 && st.checkpoint_due && !local && !st.shard) {
    st.checkpoint_due = false;
    st.checkpoint_parts = st.optimizer->save_plan();
  }
  settle_step(self, config);
}

}  // namespace

step_report report_of(const dp_trainer_state& st, bool skipped, double exposed_s,
                      uint64_t checksum) {
  step_report report{st.job->rank,
                     st.job->generation,
                     static_cast<uint32_t>((st.step - 1) / st.steps_per_epoch),
                     st.step,
                     skipped ? 0.0 : st.own_loss_sum,
                     st.mine,
                     skipped,
                     st.step_allreduce_s,
                     exposed_s,
                     st.step_bytes,
                     st.compute_s,
                     seconds_between(st.started, clock_type::now()),
                     checksum};
  report.step_examples = st.step_examples;
  report.bytes_inter_host = st.step_bytes_inter_host;
  report.compressed = st.adam && compressed_stage(st.stage);
  report.own_non_finite = st.own_non_finite;
  return report;
}

namespace {

// The step settles once its rows are in the tables (on_step_settled).
void settle_step(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  if (st.table_pushes_due > 0) {
    st.settling = true;
    return;
  }
  on_step_settled(self, config);
}

}  // namespace

// A settled step is reported, so that a step the coordinator has every report of has its rows
// in the tables (what a --mode hybrid checkpoint waits for). Then member 0 sends a checkpoint
// due, and this member's next pull, its epoch's parameters (and so the evaluation) and its
// done come after. A new generation that arrives meanwhile waits as pending (st.in_step holds
// until then).
void on_step_settled(self_ptr self, const dp_trainer_config& config) {
  auto& st = self->state;
  if (st.report_due) {
    auto [step, report] = std::move(*st.report_due);
    st.report_due.reset();
    send_report(self, config, step, std::move(report));
  }
  auto go = [=] {
    self->state.in_step = false;
    go_on(self, config, true);
  };
  if (st.checkpoint_parts.empty() && st.checkpoint_pieces.empty()) return go();
  send_checkpoint(self, config, go);
}

}  // namespace troupe::dp_parts
