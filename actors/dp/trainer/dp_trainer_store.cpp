// The dp_trainer's parameters and optimizer state: one bucket_store. For the optimizers that
// update each value on its own (sgd, momentum, adam, adamw) it holds one flat slice, the whole
// model in the layout's order, and the task computes on that slice's values in place: the
// parameters are held once, so a member keeps values + moments + one gradient (16 bytes a
// parameter with Adam, as DDP). DASH, an app's rule and 1-bit / 0/1 Adam work per tensor: their
// store holds one slice per tensor and the task reads a flat copy of it (4 bytes more).
#include <algorithm>
#include <limits>

#include "actors/bucket/elementwise_step.hpp"
#include "actors/dp/trainer/dp_trainer_parts.hpp"
#include "actors/dp/trainer/store_pieces.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_parts {

namespace {

// The flat slice's name (never a tensor's: flat stores are never matched against the layout).
const std::string flat_slice = "(flat)";

bool flat_state(const optimizer_config& o, const dp_compression& compression) {
  return elementwise(o) && compression.adam == compressed_adam::none;
}

// The spec of a new store of `optimizer` (its values allocated by the store, filled after).
bucket_spec store_spec(dp_trainer_state& st, const optimizer_config& optimizer) {
  bucket_spec spec{0, 1, optimizer, {}};
  spec.values_follow = true;
  if (st.flat_store)
    spec.tensors.push_back(
        dense_tensor{flat_slice, {static_cast<uint32_t>(st.layout->total)}, 0, {}});
  else
    for (const auto& s : st.optimizer_plan.buckets[0].slices)
      spec.tensors.push_back(dense_tensor{s.tensor, s.shape, s.row_offset, {}});
  return spec;
}

// The store replaced by a new one of `spec` that holds the same parameters (the old one goes
// first: never two stores at once).
void replace_store(dp_trainer_state& st, const dp_trainer_config& config, bucket_spec spec) {
  const std::vector<float> params(st.params.begin(), st.params.end());
  st.optimizer.reset();
  st.optimizer.emplace(std::move(spec), config.rules);
  bind_params(st);
  std::copy(params.begin(), params.end(), st.params.begin());
}

// A checkpoint of sharded state resumed under --zero-stage 0: a whole store of `spec`, its
// values the checkpoint's parameters (st.resumed) and its moments the pieces, which this member
// restored as one member's cut (every value).
caf::error take_whole_from_pieces(dp_trainer_state& st, const dp_trainer_config& config,
                                  bucket_spec spec) {
  if (!st.flat_store)
    return make_error(errc::bad_configuration,
                      "a checkpoint of sharded state resumes under --zero-stage 0 with adam, "
                      "adamw, momentum or sgd only");
  if (auto err = take_resumed(st)) return err;
  const auto pieces = std::move(*st.pieces_restored);
  st.pieces_restored.reset();
  replace_store(st, config, std::move(spec));
  auto whole = st.optimizer->adam_state(0);
  const auto& all = pieces.held.front();
  if (pieces.held.size() != 1 || whole.m.empty() != all.m.empty() ||
      whole.v.empty() != all.v.empty())
    return make_error(errc::shape_mismatch,
                      "the checkpoint holds the state of another optimizer (saved with another "
                      "--optimizer)");
  for (const auto& p : all.pieces) {
    if (p.offset + p.count > whole.values.size())
      return make_error(errc::shape_mismatch, "the checkpoint's pieces lie outside the model");
    if (!all.m.empty()) std::copy_n(all.m.begin() + p.at, p.count, whole.m.begin() + p.offset);
    if (!all.v.empty()) std::copy_n(all.v.begin() + p.at, p.count, whole.v.begin() + p.offset);
  }
  st.optimizer->set_version(pieces.version);
  return {};
}

// Where slice `s` of a store per tensor lies in the flat values.
caf::expected<flat_range> range_of(const dp_trainer_state& st, const dense_tensor& s) {
  const auto range = locate(*st.layout, slice{s.name, s.row_offset, s.shape});
  if (!range) return make_error(errc::shape_mismatch, "a slice of the store not in the model");
  return *range;
}

}  // namespace

// A checkpoint's store, restored as its parts came (restore_atom), in place of a new one.
caf::error take_resumed(dp_trainer_state& st) {
  if (!same_slices(st.resumed->slices(), st.store_shapes))
    return make_error(errc::shape_mismatch,
                      "the checkpoint holds another model, or its state in another form (saved by "
                      "an earlier Troupe, or with another --optimizer)");
  st.optimizer = std::move(st.resumed);
  st.resumed.reset();
  bind_params(st);
  return {};
}

caf::error make_store(dp_trainer_state& st, const dp_trainer_config& config,
                      const group_start& job) {
  if (auto err = check_rule(job.optimizer, config.rules)) return err;
  st.optimizer_plan = plan_buckets(*st.layout, 1, 1);
  // --zero-stage 1: the store holds the parameters only; each member's pieces of the
  // optimizer's state are in its shard (dp_trainer_shards.cpp).
  const auto optimizer = job.zero_stage > 0 ? parameters_only(job.optimizer) : job.optimizer;
  st.flat_store = flat_state(optimizer, job.compression);
  if (st.flat_store && st.layout->total > std::numeric_limits<uint32_t>::max())
    return make_error(errc::bad_configuration, "a model of over 4 G parameters");
  auto spec = store_spec(st, optimizer);
  st.store_shapes = spec.tensors;
  if (st.resumed && st.pieces_restored && job.zero_stage == 0)
    return take_whole_from_pieces(st, config, std::move(spec));
  if (st.resumed) return take_resumed(st);
  st.optimizer.emplace(std::move(spec), config.rules);
  bind_params(st);
  config.task->initialize(job.seed, st.params);
  if (!kernels::all_finite(st.params))  // (a Python task's initialize that raised leaves NaN)
    return make_error(errc::task_failed, "the task's initialize left values that are not finite");
  if (!st.flat_store)  // the store's own values start where the task put them
    for (size_t s = 0; s < st.optimizer->slices().size(); ++s) {
      const auto range = range_of(st, st.optimizer->slices()[s]);
      if (!range) return std::move(range.error());
      std::copy_n(st.params.begin() + range->offset, range->count,
                  st.optimizer->set_values(s).begin());
    }
  return {};
}

void keep_parameters_only(dp_trainer_state& st, const dp_trainer_config& config,
                          const group_start& job) {
  replace_store(st, config, store_spec(st, parameters_only(job.optimizer)));
}

void bind_params(dp_trainer_state& st) {
  if (st.flat_store) {
    st.params = st.optimizer->set_values(0);
    return;
  }
  st.params_copy.resize(st.layout->total, 0.0f);
  scatter(*st.layout, st.optimizer->slices(), st.params_copy);
  st.params = st.params_copy;
}

caf::error step_store(dp_trainer_state& st, std::span<const float> grad) {
  push_request push{0, 0, st.step, vector_clock{}};
  std::vector<std::span<const float>> views;
  for (const auto& s : st.optimizer->slices()) {
    push.dense.push_back(dense_tensor{s.name, s.shape, s.row_offset, {}});
    if (st.flat_store) {
      views.push_back(grad);
      continue;
    }
    const auto range = range_of(st, s);
    if (!range) return std::move(range.error());
    views.push_back(grad.subspan(range->offset, range->count));
  }
  auto applied = st.optimizer->apply(std::move(push), std::move(views));
  if (!applied) return std::move(applied.error());
  return {};
}

}  // namespace troupe::dp_parts
