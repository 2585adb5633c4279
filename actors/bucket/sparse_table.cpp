#include "actors/bucket/sparse_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/elementwise_step.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using opt_kind = optimizer_config::kind;

// Hashing spreads rows unevenly; a quarter more than the even share (and a little extra for
// small tables) keeps honest jobs clear of the bound.
uint64_t share_of(uint64_t capacity, uint32_t buckets) {
  const uint64_t even = (capacity + buckets - 1) / buckets;
  return even + even / 4 + 1024;
}

}  // namespace

sparse_table::sparse_table(table_config config, uint32_t bucket, uint32_t buckets, uint64_t seed,
                           optimizer_config optimizer, float clip, std::optional<update_rule> rule)
    : config_(std::move(config)),
      bucket_(bucket),
      buckets_(std::max<uint32_t>(buckets, 1)),
      seed_(seed),
      optimizer_(optimizer),
      clip_(clip),
      rule_(std::move(rule)),
      capacity_(share_of(config_.capacity, buckets_)),
      moments_(moments_of(optimizer_, rule_)),
      rows_(config_.row_dim * (1 + moments_)) {
  // Rows are vectors: DASH's blocks need matrices, so rows take AdamW (two moments as DASH's),
  // as 1-D slices do.
  if (optimizer_.type == opt_kind::dash) optimizer_.type = opt_kind::adamw;
}

caf::error sparse_table::check_ids(const std::vector<uint64_t>& ids) const {
  // Workers send ids sorted and unique; anything else could make one message build many rows.
  if (!std::is_sorted(ids.begin(), ids.end()) ||
      std::adjacent_find(ids.begin(), ids.end()) != ids.end())
    return make_error(errc::malformed_message,
                      fmt::format("rows of {} must come sorted and without repeats", config_.name));
  uint64_t fresh = 0;
  for (uint64_t id : ids) {
    if (row_bucket(config_.name, id, buckets_) != bucket_)
      return make_error(errc::unknown_bucket,
                        fmt::format("row {} of {} belongs to another bucket", id, config_.name));
    fresh += rows_.find(id) ? 0 : 1;
  }
  if (rows_.size() + fresh > capacity_)
    return make_error(
        errc::message_too_large,
        fmt::format("table {} is full in this bucket ({} rows)", config_.name, capacity_));
  return {};
}

uint32_t sparse_table::slot_of(uint64_t id) {
  if (const auto slot = rows_.find(id)) return *slot;
  const uint32_t slot = rows_.add(id);  // zeros: the moments' start
  init_row(seed_, config_.name, id, config_.init_scale, value_of(slot));
  return slot;
}

std::span<float> sparse_table::moment_of(uint32_t slot, unsigned k) {
  if (k > moments_) return {};
  return part(rows_.floats(slot), k);
}

caf::expected<sparse_rows> sparse_table::read(const std::vector<uint64_t>& ids) {
  if (auto err = check_ids(ids)) return err;
  sparse_rows out{config_.name, config_.row_dim, ids, {}};
  out.values.reserve(ids.size() * config_.row_dim);
  for (uint64_t id : ids) {
    const auto value = value_of(slot_of(id));
    out.values.insert(out.values.end(), value.begin(), value.end());
  }
  return out;
}

caf::error sparse_table::check(const sparse_rows& grads, float max_abs) const {
  if (grads.name != config_.name || grads.row_dim != config_.row_dim ||
      grads.values.size() != grads.ids.size() * uint64_t{config_.row_dim})
    return make_error(errc::shape_mismatch,
                      fmt::format("rows for {} ({} values per row) do not fit table {} ({})",
                                  grads.name, grads.row_dim, config_.name, config_.row_dim));
  std::unordered_set<uint64_t> seen;
  for (uint64_t id : grads.ids)
    if (!seen.insert(id).second)
      return make_error(errc::malformed_message,
                        fmt::format("row {} of {} appears twice", id, config_.name));
  for (float g : grads.values)
    if (!(std::abs(g) <= max_abs))
      return make_error(errc::non_finite, fmt::format("row gradient value {} in {} (limit {:g})", g,
                                                      config_.name, max_abs));
  return check_ids(grads.ids);
}

uint64_t sparse_table::apply(const sparse_rows& grads, float lr_scale) {
  const auto& o = optimizer_;
  uint64_t refused = 0;
  const float lr = o.lr * lr_scale;
  std::vector<float> g(config_.row_dim);
  for (size_t i = 0; i < grads.ids.size(); ++i) {
    const uint32_t slot = slot_of(grads.ids[i]);
    std::copy_n(grads.values.begin() + i * config_.row_dim, config_.row_dim, g.begin());
    if (clip_ > 0) {
      double norm = 0;
      for (float x : g) norm += double(x) * x;
      norm = std::sqrt(norm);
      if (norm > clip_)
        for (float& x : g) x *= static_cast<float>(clip_ / norm);
    }
    const uint64_t steps = ++rows_.steps(slot);
    const auto value = value_of(slot), m = moment_of(slot, 1), v = moment_of(slot, 2);
    if (o.type == opt_kind::app) {
      if (!step_app_rule(rule_, o, value, m, v, g, steps, lr)) ++refused;
    } else {  // dash: rows take AdamW (the constructor)
      step_elementwise(o, lr, steps, value, m, v, g);
    }
  }
  return refused;
}

sparse_table::row_copies sparse_table::copy_rows(const std::vector<uint64_t>& ids) const {
  row_copies out{ids, {}};
  for (uint64_t id : ids) {
    const auto slot = rows_.find(id);
    if (!slot) {
      out.rows.emplace_back();
      continue;
    }
    const auto floats = rows_.floats(*slot);
    out.rows.push_back(row{{floats.begin(), floats.end()}, rows_.steps(*slot)});
  }
  return out;
}

void sparse_table::restore_rows(row_copies copies) {
  for (size_t i = 0; i < copies.ids.size(); ++i) {
    if (!copies.rows[i]) {
      rows_.erase(copies.ids[i]);
      continue;
    }
    const auto slot = rows_.find(copies.ids[i]);
    const uint32_t at = slot ? *slot : rows_.add(copies.ids[i]);
    std::copy(copies.rows[i]->floats.begin(), copies.rows[i]->floats.end(),
              rows_.floats(at).begin());
    rows_.steps(at) = copies.rows[i]->steps;
  }
}

}  // namespace troupe

namespace troupe {

std::vector<table_rows> sparse_table::save(size_t rows_per_part) const {
  std::vector<uint64_t> ids = rows_.ids();
  std::sort(ids.begin(), ids.end());
  std::vector<table_rows> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % std::max<size_t>(rows_per_part, 1) == 0)
      out.push_back(table_rows{config_.name, config_.row_dim, {}, {}, {}, {}, {}});
    const uint32_t slot = *rows_.find(ids[i]);
    const auto floats = rows_.floats(slot);
    auto& saved = out.back();
    auto keep = [&](std::vector<float>& into, unsigned k) {
      const auto values = part(floats, k);
      into.insert(into.end(), values.begin(), values.end());
    };
    saved.ids.push_back(ids[i]);
    keep(saved.values, 0);
    if (moments_ >= 1) keep(saved.m, 1);
    if (moments_ >= 2) keep(saved.v, 2);
    saved.steps.push_back(rows_.steps(slot));
  }
  return out;
}

caf::error sparse_table::restore(const table_rows& saved) {
  const size_t dim = config_.row_dim;
  const size_t n = saved.ids.size();
  const bool has_m = moments_ >= 1;
  const bool has_v = moments_ >= 2;
  if (saved.row_dim != dim || saved.values.size() != n * dim || saved.steps.size() != n ||
      saved.m.size() != (has_m ? n * dim : 0) || saved.v.size() != (has_v ? n * dim : 0))
    return make_error(errc::shape_mismatch,
                      fmt::format("saved rows of {} do not match its row width", config_.name));
  if (auto err = check_ids(saved.ids)) return err;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = slot_of(saved.ids[i]);
    const auto at = [&](const std::vector<float>& xs) { return xs.begin() + i * dim; };
    std::copy_n(at(saved.values), dim, value_of(slot).begin());
    if (has_m) std::copy_n(at(saved.m), dim, moment_of(slot, 1).begin());
    if (has_v) std::copy_n(at(saved.v), dim, moment_of(slot, 2).begin());
    rows_.steps(slot) = saved.steps[i];
  }
  return {};
}

}  // namespace troupe
