// The dp_trainer's model buffers (tensor_spec::buffer: BatchNorm's running statistics), which
// follow DDP: every step, every member's become the first member's. They ride in the step's
// meta, which is summed in fp32 and never scaled or compressed: member 0 writes its own,
// the others zeros, so the sum is member 0's. In the flat vector they sit beside the
// parameters (so checkpoints, state hand-overs and evaluations carry them), and the optimizer
// sees a zero gradient for them; their values are set after each step, never stepped.
#include <algorithm>
#include <cmath>

#include "actors/dp/trainer/dp_trainer_parts.hpp"

namespace troupe::dp_parts {

namespace {

// Where the buffers start in the step's values: after the fixed meta and the members' rates.
size_t buffers_at(const dp_trainer_state& st) {
  return meta_size + st.job->size;
}

}  // namespace

void find_model_buffers(dp_trainer_state& st) {
  const auto& layout = *st.layout;
  st.model_buffers.clear();
  st.model_buffer_values = 0;
  st.is_model_buffer.assign(layout.specs.size(), false);
  for (size_t t = 0; t < layout.specs.size(); ++t) {
    if (!layout.specs[t].buffer) continue;
    const uint64_t end = t + 1 < layout.specs.size() ? layout.offsets[t + 1] : layout.total;
    st.model_buffers.push_back(flat_range{layout.offsets[t], end - layout.offsets[t]});
    st.model_buffer_values += end - layout.offsets[t];
    st.is_model_buffer[t] = true;
  }
}

bool send_model_buffers(dp_trainer_state& st, std::span<float> grad, bool computed) {
  if (st.model_buffers.empty()) return true;
  auto meta = std::span<float>(*st.values).subspan(buffers_at(st), st.model_buffer_values);
  const bool first = st.job->rank == 0;
  const std::span<const float> before(st.params);
  const bool put_aside = st.shard && st.shard->streamed;  // (--zero-stage 2)
  size_t at = 0;
  for (const auto& b : st.model_buffers) {
    auto out = meta.subspan(at, b.count);
    auto values = put_aside ? streamed_model_buffers(st).subspan(at, b.count)
                            : grad.subspan(b.offset, b.count);
    if (!first)
      std::fill(out.begin(), out.end(), 0.0f);
    else if (computed)
      std::copy(values.begin(), values.end(), out.begin());
    else
      std::copy_n(before.begin() + b.offset, b.count, out.begin());
    std::fill(values.begin(), values.end(), 0.0f);
    at += b.count;
  }
  return std::all_of(meta.begin(), meta.end(), [](float v) { return std::isfinite(v); });
}

std::span<const float> summed_model_buffers(const dp_trainer_state& st) {
  return std::span<const float>(*st.values).subspan(buffers_at(st), st.model_buffer_values);
}

void adopt_model_buffers(dp_trainer_state& st) {
  if (st.model_buffers.empty()) return;
  const auto meta = summed_model_buffers(st);
  // Every member holds the same sum, so all keep their buffers alike when it is not finite
  // (a 0/1 Adam sync step goes on whatever one member's gradient was: not its buffers).
  if (!std::all_of(meta.begin(), meta.end(), [](float v) { return std::isfinite(v); })) return;
  size_t at = 0;
  for (const auto& b : st.model_buffers) {
    std::copy_n(meta.begin() + at, b.count, st.params.begin() + b.offset);
    at += b.count;
  }
  // A store per tensor holds its own values, which the next step starts from (and a checkpoint
  // saves); a flat store's are st.params.
  if (st.flat_store) return;
  for (size_t s = 0; s < st.optimizer->slices().size(); ++s) {
    const auto& t = st.optimizer->slices()[s];
    const int index = st.layout->find(t.name);
    if (index < 0 || !st.is_model_buffer[index]) continue;
    const auto range = locate(*st.layout, slice{t.name, t.row_offset, t.shape});
    auto values = st.optimizer->set_values(s);
    if (!range || range->count != values.size()) continue;  // not this layout's: left alone
    std::copy_n(st.params.begin() + range->offset, values.size(), values.begin());
  }
}

}  // namespace troupe::dp_parts
