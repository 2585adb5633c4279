#include "actors/bucket/sparse_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/elementwise_step.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"
#include "troupe/random.hpp"

namespace troupe {

namespace {

using opt_kind = optimizer_config::kind;
using evict_kind = eviction_policy::kind;

// Hashing spreads rows unevenly; without eviction, a quarter more than the even share (and a
// little extra for small tables) keeps honest jobs clear of the bound. With eviction the even
// share is what eviction keeps to.
uint64_t share_of(const table_config& config, uint32_t buckets) {
  const uint64_t even = (config.capacity + buckets - 1) / buckets;
  if (config.evict.type != evict_kind::none) return std::max<uint64_t>(even, 1);
  return even + even / 4 + 1024;
}

uint32_t system_seconds() {
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// An eviction frees a sixteenth of the share besides the rows it must, so that it runs once per
// that many new rows rather than on every read.
constexpr uint64_t evict_slack_divisor = 16;
// Rows whose marks estimate the eviction threshold.
constexpr size_t eviction_sample = 4096;
// The mark of a row that a read names while the read evicts: kept.
constexpr uint32_t kept_mark = UINT32_MAX;

}  // namespace

caf::error check_table(const table_spec& spec) {
  if (!parse_eviction(spec.evict))
    return make_error(errc::bad_configuration,
                      fmt::format("table {}: evict must be none, lru, lfu or ttl:SECONDS, not '{}'",
                                  spec.name, spec.evict));
  if (spec.admit_after < 1 || spec.admit_after > max_admit_after)
    return make_error(errc::bad_configuration,
                      fmt::format("table {}: admit_after must be in [1, {}], not {}", spec.name,
                                  max_admit_after, spec.admit_after));
  if (spec.row_dim == 0 || spec.capacity == 0)
    return make_error(errc::bad_configuration,
                      fmt::format("table {}: dim and capacity must be at least 1", spec.name));
  return {};
}

table_config config_of(const table_spec& spec) {
  return table_config{spec.name,
                      spec.row_dim,
                      spec.init_scale,
                      spec.capacity,
                      parse_eviction(spec.evict).value_or(eviction_policy{}),
                      spec.admit_after};
}

table_spec spec_of(const table_config& config) {
  return table_spec{config.name,     config.row_dim,          config.init_scale,
                    config.capacity, to_string(config.evict), config.admit_after};
}

sparse_table::sparse_table(table_config config, uint32_t bucket, uint32_t buckets, uint64_t seed,
                           optimizer_config optimizer, float clip, std::optional<update_rule> rule)
    : config_(std::move(config)),
      bucket_(bucket),
      buckets_(std::max<uint32_t>(buckets, 1)),
      seed_(seed),
      optimizer_(optimizer),
      clip_(clip),
      rule_(std::move(rule)),
      capacity_(share_of(config_, buckets_)),
      moments_(moments_of(optimizer_, rule_)),
      rows_(config_.row_dim * (1 + moments_)),
      now_(system_seconds) {
  if (config_.admit_after > 1) sightings_.emplace(capacity_);
  // Rows are vectors: DASH's blocks need matrices, so rows take AdamW (two moments as DASH's),
  // as 1-D slices do.
  if (optimizer_.type == opt_kind::dash) optimizer_.type = opt_kind::adamw;
}

bool sparse_table::creates_on_push() const {
  return config_.evict.type == evict_kind::none && config_.admit_after <= 1;
}

caf::error sparse_table::check_ids(const std::vector<uint64_t>& ids, bool creates) const {
  // Workers send ids sorted and unique; anything else could make one message build many rows.
  if (!std::is_sorted(ids.begin(), ids.end()) ||
      std::adjacent_find(ids.begin(), ids.end()) != ids.end())
    return make_error(errc::malformed_message,
                      fmt::format("rows of {} must come sorted and without repeats", config_.name));
  for (uint64_t id : ids)
    if (row_bucket(config_.name, id, buckets_) != bucket_)
      return make_error(errc::unknown_bucket,
                        fmt::format("row {} of {} belongs to another bucket", id, config_.name));
  // With eviction the capacity is kept by evicting; without, a full table refuses new rows.
  const bool bounded = creates && config_.evict.type == evict_kind::none;
  if (!bounded || rows_.size() + ids.size() <= capacity_) return {};
  uint64_t fresh = 0;
  for (uint64_t id : ids) fresh += rows_.find(id) ? 0 : 1;
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
  changed(slot);
  return slot;
}

std::span<float> sparse_table::moment_of(uint32_t slot, unsigned k) {
  if (k > moments_) return {};
  return part(rows_.floats(slot), k);
}

caf::expected<sparse_rows> sparse_table::read(const std::vector<uint64_t>& ids, row_reader reader) {
  if (auto err = check_ids(ids, reader != row_reader::observer)) return err;
  std::vector<std::optional<uint32_t>> slots(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) slots[i] = rows_.find(ids[i]);
  if (reader != row_reader::observer) take_in(ids, slots, reader);
  sparse_rows out{config_.name, config_.row_dim, ids, {}};
  out.values.resize(ids.size() * config_.row_dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto into = std::span<float>(out.values).subspan(i * config_.row_dim, config_.row_dim);
    if (slots[i]) {
      const auto value = value_of(*slots[i]);
      std::copy(value.begin(), value.end(), into.begin());
    } else {  // not admitted yet, or an observer's read of a row nobody created
      init_row(seed_, config_.name, ids[i], config_.init_scale, into);
    }
  }
  return out;
}

void sparse_table::take_in(const std::vector<uint64_t>& ids,
                           std::vector<std::optional<uint32_t>>& slots, row_reader reader) {
  const uint32_t now = config_.evict.type == evict_kind::ttl ? now_() : 0;
  std::vector<size_t> fresh;  // the ids admitted now, by their place in `ids`
  for (size_t i = 0; i < ids.size(); ++i) {
    if (slots[i]) continue;
    if (!sightings_ || sightings_->see(ids[i]) >= config_.admit_after)
      fresh.push_back(i);
    else
      ++counted_.ids_not_admitted;
  }
  if (reader == row_reader::primary && config_.evict.type != evict_kind::none) {
    // The rows the read names are kept from eviction (their slots stay theirs): their marks
    // say so while it runs.
    std::vector<uint32_t> marks;
    for (const auto& slot : slots)
      if (slot) marks.push_back(std::exchange(rows_.mark(*slot), kept_mark));
    make_room(fresh.size());
    if (config_.evict.type == evict_kind::ttl) expire(now);
    auto mark = marks.begin();
    for (const auto& slot : slots)
      if (slot) rows_.mark(*slot) = *mark++;
  }
  for (size_t i : fresh) slots[i] = slot_of(ids[i]);
  if (config_.evict.type == evict_kind::none) return;
  ++tick_;
  for (const auto& slot : slots)
    if (slot) touch(*slot, now);
  if (config_.evict.type == evict_kind::lfu && reads_since_aging_ >= capacity_ * 8) age_marks();
}

void sparse_table::touch(uint32_t slot, uint32_t now) {
  auto& mark = rows_.mark(slot);
  switch (config_.evict.type) {
    case evict_kind::lru:
      mark = tick_;
      break;
    case evict_kind::lfu:
      mark += mark < kept_mark - 1 ? 1 : 0;
      ++reads_since_aging_;
      break;
    case evict_kind::ttl:
      mark = now;
      break;
    case evict_kind::none:
      break;
  }
}

void sparse_table::age_marks() {
  rows_.each([&](uint64_t, uint32_t slot) { rows_.mark(slot) >>= 1; });
  reads_since_aging_ = 0;
}

void sparse_table::make_room(size_t fresh) {
  if (rows_.size() + fresh <= capacity_ || rows_.size() == 0) return;
  const uint64_t spare = fresh + capacity_ / evict_slack_divisor;
  const uint64_t target = capacity_ > spare ? capacity_ - spare : 0;
  // The mark below which about the rows to go lie, from a sample of marks; a higher one when
  // too few went (the sample erred, or the rows are kept).
  std::vector<uint32_t> marks;
  for (uint32_t slot : rows_.sample(eviction_sample)) marks.push_back(rows_.mark(slot));
  std::sort(marks.begin(), marks.end());
  size_t k =
      std::min<size_t>(marks.size() - 1, (rows_.size() - std::min<uint64_t>(rows_.size(), target)) *
                                             marks.size() / std::max<size_t>(rows_.size(), 1));
  while (rows_.size() > target && k < marks.size() && marks[k] != kept_mark) {
    drop(victims_at(marks[k], rows_.size() - target));
    k = std::upper_bound(marks.begin(), marks.end(), marks[k]) - marks.begin();
  }
}

std::vector<uint64_t> sparse_table::victims_at(uint32_t threshold, uint64_t need) const {
  // Rows under the threshold go first, then rows at it, these drawn by a hash of their id and
  // the evictions so far: never by where they lie in the index (taking the first ones would
  // empty its start and crowd the rest, and linear probing's runs there would grow without
  // bound), and the same in a restored copy.
  std::vector<std::pair<uint64_t, uint64_t>> candidates;  // (order, id)
  rows_.each([&](uint64_t id, uint32_t slot) {
    const uint32_t mark = rows_.mark(slot);
    if (mark > threshold) return;
    const uint64_t draw = splitmix64_finalize(id ^ counted_.rows_evicted) >> 1;
    candidates.emplace_back(mark < threshold ? draw : draw | (uint64_t{1} << 63), id);
  });
  if (candidates.size() > need) {
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(need),
                     candidates.end());
    candidates.resize(need);
  }
  std::vector<uint64_t> victims;
  for (const auto& c : candidates) victims.push_back(c.second);
  return victims;
}

void sparse_table::expire(uint32_t now) {
  const uint32_t ttl = config_.evict.ttl_seconds;
  if (now - last_sweep_ < std::max<uint32_t>(ttl / 8, 1)) return;
  last_sweep_ = now;
  std::vector<uint64_t> victims;
  rows_.each([&](uint64_t id, uint32_t slot) {
    const uint32_t mark = rows_.mark(slot);
    if (mark != kept_mark && now - mark > ttl) victims.push_back(id);
  });
  drop(victims);
}

void sparse_table::drop(const std::vector<uint64_t>& victims) {
  for (uint64_t id : victims) rows_.erase(id);
  evicted_.insert(evicted_.end(), victims.begin(), victims.end());
  if (tracking_)
    evicted_since_cut_.insert(evicted_since_cut_.end(), victims.begin(), victims.end());
  counted_.rows_evicted += victims.size();
}

void sparse_table::evict(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids)
    if (rows_.find(id)) {
      rows_.erase(id);
      ++counted_.rows_evicted;
      if (tracking_) evicted_since_cut_.push_back(id);
    }
}

table_delta sparse_table::cut(bool every_row) {
  table_delta out{config_.name, config_.row_dim, {}, {}, {}};
  tracking_ = true;
  if (!every_row) out.evicted = std::exchange(evicted_since_cut_, {});
  evicted_since_cut_.clear();
  std::vector<std::pair<uint64_t, uint32_t>> changed_rows;  // (id, slot), in id order
  rows_.each([&](uint64_t id, uint32_t slot) {
    if (every_row || rows_.meta(slot).changed == delta_) changed_rows.emplace_back(id, slot);
  });
  std::sort(changed_rows.begin(), changed_rows.end());
  out.ids.reserve(changed_rows.size());
  out.values.reserve(changed_rows.size() * config_.row_dim);
  for (const auto& [id, slot] : changed_rows) {
    const auto value = part(rows_.floats(slot), 0);
    out.ids.push_back(id);
    out.values.insert(out.values.end(), value.begin(), value.end());
  }
  ++delta_;
  return out;
}

table_counters sparse_table::counters() const {
  table_counters out = counted_;
  out.table = config_.name;
  out.rows = rows_.size();
  return out;
}

caf::error sparse_table::check(const sparse_rows& grads, float max_abs) const {
  if (grads.name != config_.name || grads.row_dim != config_.row_dim ||
      grads.values.size() != grads.ids.size() * uint64_t{config_.row_dim})
    return make_error(errc::shape_mismatch,
                      fmt::format("rows for {} ({} values per row) do not fit table {} ({})",
                                  grads.name, grads.row_dim, config_.name, config_.row_dim));
  for (float g : grads.values)
    if (!(std::abs(g) <= max_abs))
      return make_error(errc::non_finite, fmt::format("row gradient value {} in {} (limit {:g})", g,
                                                      config_.name, max_abs));
  return check_ids(grads.ids, creates_on_push());
}

uint64_t sparse_table::apply(const sparse_rows& grads, float lr_scale) {
  const auto& o = optimizer_;
  uint64_t refused = 0;
  const float lr = o.lr * lr_scale;
  std::vector<float> g(config_.row_dim);
  const bool creates = creates_on_push();
  for (size_t i = 0; i < grads.ids.size(); ++i) {
    const auto found = rows_.find(grads.ids[i]);
    if (!found && !creates) {  // not admitted, or evicted since it was read
      ++counted_.grads_dropped;
      continue;
    }
    const uint32_t slot = found ? *found : slot_of(grads.ids[i]);
    std::copy_n(grads.values.begin() + i * config_.row_dim, config_.row_dim, g.begin());
    if (clip_ > 0) {
      double norm = 0;
      for (float x : g) norm += double(x) * x;
      norm = std::sqrt(norm);
      if (norm > clip_)
        for (float& x : g) x *= static_cast<float>(clip_ / norm);
    }
    auto& count = rows_.steps(slot);
    count += count < UINT32_MAX ? 1 : 0;  // (saturates: Adam's bias correction is 1 long before)
    const uint64_t steps = count;
    changed(slot);
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
    rows_.steps(at) = static_cast<uint32_t>(copies.rows[i]->steps);
    changed(at);
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
    if (config_.evict.type != evict_kind::none) saved.marks.push_back(rows_.mark(slot));
  }
  return out;
}

table_state sparse_table::save_state() const {
  table_state out{config_.name,
                  {},
                  0,
                  tick_,
                  reads_since_aging_,
                  last_sweep_,
                  counted_.rows_evicted,
                  counted_.ids_not_admitted,
                  counted_.grads_dropped};
  if (sightings_) {
    out.sightings = sightings_->counters();
    out.since_halving = sightings_->since_halving();
  }
  return out;
}

caf::error sparse_table::restore_state(const table_state& saved) {
  if (sightings_ ? !sightings_->restore(saved.sightings, saved.since_halving)
                 : !saved.sightings.empty())
    return make_error(errc::shape_mismatch,
                      fmt::format("the saved admission state of {} has {} counters", config_.name,
                                  saved.sightings.size()));
  tick_ = saved.tick;
  reads_since_aging_ = saved.reads_since_aging;
  last_sweep_ = saved.last_sweep;
  counted_ = table_counters{config_.name, 0, saved.rows_evicted, saved.ids_not_admitted,
                            saved.grads_dropped};
  return {};
}

caf::error sparse_table::restore(const table_rows& saved) {
  const size_t dim = config_.row_dim;
  const size_t n = saved.ids.size();
  const bool has_m = moments_ >= 1;
  const bool has_v = moments_ >= 2;
  if (saved.row_dim != dim || saved.values.size() != n * dim || saved.steps.size() != n ||
      saved.m.size() != (has_m ? n * dim : 0) || saved.v.size() != (has_v ? n * dim : 0) ||
      (!saved.marks.empty() && saved.marks.size() != n))
    return make_error(errc::shape_mismatch,
                      fmt::format("saved rows of {} do not match its row width", config_.name));
  if (auto err = check_ids(saved.ids, true)) return err;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = slot_of(saved.ids[i]);
    const auto at = [&](const std::vector<float>& xs) { return xs.begin() + i * dim; };
    std::copy_n(at(saved.values), dim, value_of(slot).begin());
    if (has_m) std::copy_n(at(saved.m), dim, moment_of(slot, 1).begin());
    if (has_v) std::copy_n(at(saved.v), dim, moment_of(slot, 2).begin());
    rows_.steps(slot) = static_cast<uint32_t>(std::min<uint64_t>(saved.steps[i], UINT32_MAX));
    if (!saved.marks.empty()) rows_.mark(slot) = saved.marks[i];
  }
  return {};
}

}  // namespace troupe
