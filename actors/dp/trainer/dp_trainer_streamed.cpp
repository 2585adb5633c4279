// The dp_trainer's gradient under --zero-stage 2 (ZeRO stage 2): no member holds a whole
// gradient. The task puts each tensor's gradient as backward finishes it
// (task_replica::gradient_range_streamed); it is copied into the buffer of its bucket, one of a
// few that are reused (bucket_buffers), and each bucket, once full, is reduce-scattered from
// there; on the group's thread, once summed, the sums of the pieces this member holds are copied
// into the pieces' pending sums, and the buffer goes back. A member then holds the parameters
// (4 bytes a parameter), its pieces' sums (4 / n, and as much per backup) and moments (8 / n
// with Adam, and as much per backup), and a few buckets. A task that does not stream has its
// whole gradient computed into a vector of the trainer's and put from there.
#include <algorithm>

#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

namespace {

// Buffers lent at once: one being summed, one waiting for the group, one being filled.
constexpr size_t buffers_lent = 3;

flat_range tensor_range(const flat_layout& layout, size_t t) {
  const uint64_t end = t + 1 < layout.specs.size() ? layout.offsets[t + 1] : layout.total;
  return flat_range{layout.offsets[t], end - layout.offsets[t]};
}

// How long a put waits for a buffer: a sent bucket's collective fails within its own timeout.
std::chrono::milliseconds buffer_bound(const dp_trainer_state& st,
                                       const dp_trainer_config& config) {
  return std::chrono::milliseconds(2 * st.job->timeout_ms) +
         std::chrono::duration_cast<std::chrono::milliseconds>(config.request_timeout);
}

// Tensor t's gradient (none: zeros) into its buckets' buffers, a buffer tensor's values beside
// them (the buckets then see zeros: the optimizer steps no buffer); then `tell`(t).
void put_tensor(dp_trainer_state& st, const dp_trainer_config& config, size_t t,
                std::span<const float> values, const std::function<void(size_t)>& tell) {
  auto& g = *st.shard->streamed;
  if (g.failed || t >= g.put.size() || g.put[t]) return;
  const auto range = tensor_range(*st.layout, t);
  if (!values.empty() && values.size() != range.count) {
    g.failed = make_error(errc::shape_mismatch,
                          fmt::format("the task put {} values for tensor '{}' of {}", values.size(),
                                      st.layout->specs[t].name, range.count));
    return;
  }
  g.put[t] = true;
  const bool buffer = st.is_model_buffer[t];
  if (buffer && !values.empty())
    std::copy(values.begin(), values.end(), g.model_buffers.begin() + g.buffer_at[t]);
  for (size_t b = st.next_bucket; b < st.buckets.size(); ++b) {
    const auto& bucket = st.buckets[b];
    const uint64_t lo = std::max(range.offset, bucket.begin);
    const uint64_t hi = std::min(range.offset + range.count, bucket.end);
    if (lo >= hi) continue;
    if (!g.leases[b]) {
      auto lease = g.pool->take(buffer_bound(st, config));
      if (!lease) {
        g.failed = std::move(lease.error());
        return;
      }
      g.leases[b] = std::move(*lease);
    }
    auto out = g.leases[b]->values(bucket.end - bucket.begin).subspan(lo - bucket.begin, hi - lo);
    if (values.empty() || buffer)
      std::fill(out.begin(), out.end(), 0.0f);
    else
      std::copy_n(values.begin() + (lo - range.offset), hi - lo, out.begin());
  }
  if (!buffer) tell(t);
}

// A task that does not stream: its whole gradient into g.whole, each tensor put as it is told.
caf::expected<range_result> whole_then_put(dp_trainer_state& st, example_range share,
                                           uint32_t epoch, const gradient_put& put) {
  auto& g = *st.shard->streamed;
  g.whole.resize(st.layout->total);
  auto slice = [&](size_t t) {
    const auto r = tensor_range(*st.layout, t);
    return std::span<const float>(g.whole).subspan(r.offset, r.count);
  };
  auto done =
      !st.tables.empty()
          ? st.replica->gradient_range(st.params, st.rows, epoch, share.first, share.count, g.whole)
          : st.replica->gradient_range(st.params, epoch, share.first, share.count, g.whole,
                                       [&](size_t t) { put(t, slice(t)); });
  if (done)
    for (size_t t = 0; t < st.layout->specs.size(); ++t) put(t, slice(t));
  return done;
}

}  // namespace

void make_streamed(dp_trainer_state& st) {
  auto& g = st.shard->streamed.emplace();
  uint64_t largest = 0;
  for (const auto& b : st.buckets) largest = std::max(largest, b.end - b.begin);
  g.pool = bucket_buffers::make(largest, buffers_lent);
  g.buffer_at.assign(st.layout->specs.size(), 0);
  uint64_t at = 0;
  for (size_t t = 0; t < st.layout->specs.size(); ++t)
    if (st.is_model_buffer[t]) g.buffer_at[t] = at, at += tensor_range(*st.layout, t).count;
  g.model_buffers.assign(at, 0.0f);
}

caf::expected<double> streamed_share_gradient(self_ptr self, const dp_trainer_config& config,
                                              example_range share, uint32_t epoch,
                                              const std::function<void(size_t)>& tell) {
  auto& st = self->state;
  auto& g = *st.shard->streamed;
  auto& x = *st.shard->pieces;
  g.put.assign(st.layout->specs.size(), false);
  g.leases.assign(st.buckets.size(), nullptr);
  g.failed = {};
  x.pending.assign(x.held.empty() ? 0 : pending_bases(x).back() + x.held.back().total, 0.0f);
  const gradient_put put = [&](size_t t, std::span<const float> values) {
    put_tensor(st, config, t, values, tell);
  };
  range_result done;
  if (share.count > 0) {
    auto r = !st.replica->streams_gradients() ? whole_then_put(st, share, epoch, put)
             : st.tables.empty()              ? st.replica->gradient_range_streamed(
                                                    st.params, epoch, share.first, share.count, put)
                                 : st.replica->gradient_range_streamed(
                                       st.params, st.rows, epoch, share.first, share.count, put);
    if (!r) return std::move(r.error());
    if (r->count != share.count)
      return make_error(errc::shape_mismatch, "the task computed another number of examples");
    done = *r;
  }
  for (size_t t = 0; t < st.layout->specs.size(); ++t) put(t, {});  // (not put: zeros)
  if (g.failed) return g.failed;
  return done.loss;
}

std::span<float> streamed_bucket(dp_trainer_state& st, size_t b) {
  const auto& bucket = st.buckets[b];
  return st.shard->streamed->leases[b]->values(bucket.end - bucket.begin);
}

void hand_over_bucket(dp_trainer_state& st, size_t b, reduce_order& order) {
  auto& g = *st.shard->streamed;
  auto lease = std::move(g.leases[b]);
  g.pool->sent(*lease);
  order.summed = [x = st.shard->pieces, b, values = order.data] {
    const auto bases = pending_bases(*x);
    const uint64_t begin = x->buckets[b].offset;
    for (size_t h = 0; h < x->held.size(); ++h) {
      const auto& p = x->held[h].pieces[b];
      auto out = pending_sum(*x, bases, h, p);
      std::copy_n(values.begin() + (p.offset - begin), p.count, out.begin());
    }
  };
  order.owner = std::move(lease);  // (the buffer goes back once the order is done with it)
}

std::span<float> streamed_model_buffers(dp_trainer_state& st) {
  return st.shard->streamed->model_buffers;
}

}  // namespace troupe::dp_parts
