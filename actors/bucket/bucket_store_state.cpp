// bucket_store's saved state: save() cuts a bucket into messages (checkpoints, new backups),
// restore() rebuilds one from them, and rejoin() lets a resumed job's workers take their ranks.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <span>
#include <utility>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/kernel_errors.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using part_kind = bucket_state_part::kind;

// Values per saved part: a quarter of the codec's element cap leaves room for everything else.
constexpr uint64_t values_per_part = uint64_t{2} << 20;

bool any_values(const std::vector<std::vector<float>>& xs) {
  return std::any_of(xs.begin(), xs.end(), [](const auto& x) { return !x.empty(); });
}

// `values` (one vector per slice) as parts of at most values_per_part values each, added to
// `plan`: ranges of slices, each a tensor named by its slice's index with the range's first
// value as its offset. Each part copies its ranges when it is made.
void plan_ranges(uint32_t bucket, part_kind kind, uint32_t worker,
                 const std::vector<std::span<const float>>& values,
                 std::vector<std::function<wire()>>& plan) {
  struct range {
    size_t slice, first, count;
  };
  std::vector<range> part;
  auto close = [&] {
    plan.push_back([bucket, kind, worker, values, part] {
      bucket_state_part out{bucket, kind, worker, {}, {}, {}, true};
      for (const auto& r : part) {
        const auto v = values[r.slice].subspan(r.first, r.count);
        out.tensors.push_back(dense_tensor{std::to_string(r.slice),
                                           {static_cast<uint32_t>(r.count)},
                                           static_cast<uint32_t>(r.first),
                                           std::vector<float>(v.begin(), v.end())});
      }
      return encode(out);
    });
    part.clear();
  };
  uint64_t room = values_per_part;
  for (size_t s = 0; s < values.size(); ++s)
    for (size_t first = 0; first < values[s].size();) {
      const size_t count = std::min<size_t>(room, values[s].size() - first);
      part.push_back(range{s, first, count});
      first += count;
      room -= count;
      if (room > 0) continue;
      close();
      room = values_per_part;
    }
  if (!part.empty()) close();
}

// Views of one vector per slice.
std::vector<std::span<const float>> views_of(const std::vector<std::vector<float>>& values) {
  return {values.begin(), values.end()};
}
std::vector<std::span<const float>> views_of(const std::vector<dense_tensor>& slices) {
  std::vector<std::span<const float>> out;
  for (const auto& s : slices) out.emplace_back(s.values);
  return out;
}

// Checks that `part` has one tensor per slice of the same size and moves the values out.
caf::expected<std::vector<std::vector<float>>> take_values(const std::vector<dense_tensor>& slices,
                                                           std::vector<dense_tensor>& tensors) {
  if (tensors.size() != slices.size())
    return make_error(errc::shape_mismatch, "a saved part has the wrong number of slices");
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < slices.size(); ++i) {
    if (tensors[i].values.size() != slices[i].values.size())
      return make_error(errc::shape_mismatch,
                        fmt::format("saved slice {} has {} values, the bucket {}", slices[i].name,
                                    tensors[i].values.size(), slices[i].values.size()));
    out.push_back(std::move(tensors[i].values));
  }
  return out;
}

// A ranged part's ranges into `target(slice)`, each where that slice's last one ended (`next`).
caf::error fill_ranges(std::vector<dense_tensor>& ranges, std::vector<uint64_t>& next,
                       const std::function<std::span<float>(size_t slice)>& target) {
  for (auto& r : ranges) {
    char* end = nullptr;
    const unsigned long s = std::strtoul(r.name.c_str(), &end, 10);
    if (r.name.empty() || *end != '\0' || s >= next.size())
      return make_error(errc::shape_mismatch, "a saved range of a slice this bucket lacks");
    auto into = target(s);
    if (r.row_offset != next[s] || r.values.size() > into.size() - next[s])
      return make_error(errc::shape_mismatch,
                        fmt::format("a saved range of slice {} out of order or too long", s));
    std::copy(r.values.begin(), r.values.end(), into.begin() + r.row_offset);
    next[s] += r.values.size();
  }
  return {};
}

}  // namespace

bucket_counters bucket_store::counters() const {
  std::vector<uint64_t> clock(clock_.entries().begin(), clock_.entries().end());
  return bucket_counters{vector_clock{std::move(clock)},
                         gate_.retired_flags(),
                         gate_.starts(),
                         in_round_,
                         version_,
                         applied_,
                         rejected_,
                         max_staleness_,
                         staleness_sum_,
                         max_clock_gap_,
                         histogram_,
                         next_push_,
                         skipped_,
                         duplicates_,
                         counted_batches_.ranges()};
}

void bucket_store::each_array_kind(const array_visitor& visit) const {
  visit(part_kind::values, 0, views_of(slices_));
  for (auto [kind, values] : {std::pair{part_kind::first_moment, &first_moment_},
                              std::pair{part_kind::second_moment, &second_moment_},
                              std::pair{part_kind::mean_square, &mean_square_},
                              std::pair{part_kind::round_sum, &round_sum_}})
    if (any_values(*values)) visit(kind, 0, views_of(*values));
  for (uint32_t w = 0; w < read_.size(); ++w)
    if (any_values(read_[w])) visit(part_kind::read, w, views_of(read_[w]));
}

std::vector<std::span<const float>> bucket_store::arrays() const {
  std::vector<std::span<const float>> out;
  each_array_kind([&](part_kind, uint32_t, std::vector<std::span<const float>> slices) {
    out.insert(out.end(), slices.begin(), slices.end());
  });
  return out;
}

std::vector<std::span<float>> bucket_store::mutable_arrays() {
  std::vector<std::span<float>> out;
  for (auto a : std::as_const(*this).arrays())  // this bucket's own arrays, not const
    out.emplace_back(const_cast<float*>(a.data()), a.size());
  return out;
}

std::vector<wire> bucket_store::save() const {
  std::vector<wire> out;
  for (const auto& make : save_plan()) out.push_back(make());
  return out;
}

wire bucket_store::saved_spec() const {
  bucket_spec spec = config_;
  spec.workers = workers_;
  spec.values_follow = true;
  for (const auto& s : slices_)
    spec.tensors.push_back(dense_tensor{s.name, s.shape, s.row_offset, {}});
  return encode(spec);
}

caf::error bucket_store::save_each(const std::function<caf::error(wire)>& put,
                                   bool arrays_apart) const {
  for (const auto& make : save_plan(arrays_apart))
    if (auto err = put(make())) return err;
  return {};
}

// The spec (shapes only, values_follow), the counters, then every dense kind the bucket keeps
// as ranges (values first), DASH state, table rows and a bsp round's rows: no part holds more
// than values_per_part values.
std::vector<std::function<wire()>> bucket_store::save_plan(bool arrays_apart) const {
  std::vector<std::function<wire()>> plan;
  plan.push_back([this] { return saved_spec(); });
  plan.push_back([this] {
    bucket_state_part counters_part{id_, part_kind::counters};
    counters_part.counters = counters();
    return encode(counters_part);
  });
  if (!arrays_apart)
    each_array_kind([&](part_kind kind, uint32_t worker, std::vector<std::span<const float>> xs) {
      plan_ranges(id_, kind, worker, xs, plan);
    });
  plan_dash(plan);
  for (const auto& t : tables_) {  // (a table's rows are gathered when the plan is made)
    const size_t rows_per_part = std::max<size_t>(1, values_per_part / (3 * t.row_dim()));
    auto parts = std::make_shared<std::vector<table_rows>>(t.save(rows_per_part));
    for (size_t k = 0; k < parts->size(); ++k)
      plan.push_back([this, parts, k] {
        bucket_state_part part{id_, part_kind::rows};
        part.rows = (*parts)[k];
        return encode(part);
      });
    plan.push_back([this, &t] {  // after the rows: restoring rows does not count as reads
      bucket_state_part part{id_, part_kind::table_state};
      part.state = t.save_state();
      return encode(part);
    });
  }
  for (size_t t = 0; t < round_rows_.size(); ++t) {
    if (round_rows_[t].empty()) continue;
    // one round's rows: bounded by what one round's pushes held
    plan.push_back([this, t] {
      table_rows sums{tables_[t].name(), tables_[t].row_dim(), {}, {}, {}, {}, {}, {}};
      for (const auto& [id, sum] : round_rows_[t]) sums.ids.push_back(id);
      std::sort(sums.ids.begin(), sums.ids.end());  // the same state saves to the same bytes
      for (uint64_t id : sums.ids) {
        const auto& sum = round_rows_[t].at(id);
        sums.values.insert(sums.values.end(), sum.begin(), sum.end());
      }
      bucket_state_part part{id_, part_kind::round_rows};
      part.rows = std::move(sums);
      return encode(part);
    });
  }
  return plan;
}

// Each slice's DASH state in fp32: one tensor per part, named by its state index, holding
// whole blocks from block `row_offset` on, at most values_per_part values (one block more
// when a single block is larger).
void bucket_store::plan_dash(std::vector<std::function<wire()>>& plan) const {
  for (uint32_t s = 0; s < dash_.size(); ++s) {
    if (!dash_[s]) continue;
    const auto& d = *dash_[s];
    for (size_t i = 0; i < d.state_count(); ++i) {
      const size_t total = d.state(i).size();
      const size_t per = d.block_values(i);
      const size_t blocks_per_part = std::max<size_t>(1, values_per_part / per);
      for (size_t first = 0; first * per < total; first += blocks_per_part) {
        const size_t end = std::min(total, (first + blocks_per_part) * per);
        plan.push_back([this, s, i, first, per, end] {
          const auto values = dash_[s]->state(i);
          dense_tensor t{std::to_string(i),
                         {static_cast<uint32_t>(end - first * per)},
                         static_cast<uint32_t>(first),
                         std::vector<float>(values.begin() + first * per, values.begin() + end)};
          return encode(bucket_state_part{id_, part_kind::dash, s, {std::move(t)}, {}, {}});
        });
      }
    }
  }
}

caf::error bucket_store::restore_dash(const bucket_state_part& part) {
  if (part.worker >= dash_.size() || !dash_[part.worker] || part.tensors.size() != 1)
    return make_error(errc::shape_mismatch, "saved DASH state for a slice without DASH");
  const auto& t = part.tensors[0];
  char* end = nullptr;
  const unsigned long index = std::strtoul(t.name.c_str(), &end, 10);
  if (t.name.empty() || *end != '\0')
    return make_error(errc::malformed_message, "saved DASH state with a bad name");
  return make_error(dash_[part.worker]->set_state(index, t.row_offset, t.values));
}

caf::error bucket_store::restore_ranges(bucket_state_part& part, range_cursors& cursors) {
  std::vector<std::vector<float>>* into = nullptr;  // none: the slices' own values
  switch (part.type) {
    case part_kind::values:
      break;
    case part_kind::first_moment:
      into = &first_moment_;
      break;
    case part_kind::second_moment:
      into = &second_moment_;
      break;
    case part_kind::mean_square:
      into = &mean_square_;
      break;
    case part_kind::round_sum:
      into = &round_sum_;
      break;
    case part_kind::read:
      if (part.worker >= read_.size())
        return make_error(errc::shape_mismatch, "a saved read copy this bucket does not keep");
      into = &read_[part.worker];
      break;
    default:
      return make_error(errc::malformed_message, "a saved part that has no ranges");
  }
  if (into && into->size() != slices_.size()) into->resize(slices_.size());
  auto& next = cursors[{static_cast<uint8_t>(part.type), part.worker}];
  next.resize(slices_.size(), 0);
  return fill_ranges(part.tensors, next, [&](size_t s) -> std::span<float> {
    if (!into) return slices_[s].values;
    auto& v = (*into)[s];
    v.resize(slices_[s].values.size(), 0.0f);  // (a kind the bucket did not keep yet)
    return v;
  });
}

caf::error bucket_store::restore_part(bucket_state_part part, range_cursors& cursors) {
  if (part.bucket != id_)
    return make_error(errc::unknown_bucket,
                      fmt::format("a part of bucket {} for bucket {}", part.bucket, id_));
  if (part.ranged) return restore_ranges(part, cursors);
  auto values = [&](std::vector<std::vector<float>>& into) -> caf::error {
    auto taken = take_values(slices_, part.tensors);
    if (!taken) return std::move(taken.error());
    into = std::move(*taken);
    return {};
  };
  switch (part.type) {
    case part_kind::counters: {
      auto& c = part.counters;
      if (c.retired.size() != workers_ || c.next_push.size() != workers_ ||
          c.clock.size() > workers_ || (!in_round_.empty() && c.in_round.size() != workers_) ||
          c.histogram.size() != staleness_histogram_size)
        return make_error(errc::shape_mismatch, "saved counters do not match the bucket");
      clock_ = std::move(c.clock);
      gate_.restore(std::move(c.retired), std::move(c.start));
      if (!in_round_.empty()) in_round_ = std::move(c.in_round);
      version_ = c.version;
      applied_ = c.applied;
      rejected_ = c.rejected;
      max_staleness_ = c.max_staleness;
      staleness_sum_ = c.staleness_sum;
      max_clock_gap_ = c.max_clock_gap;
      histogram_ = std::move(c.histogram);
      next_push_ = std::move(c.next_push);
      skipped_ = c.skipped;
      duplicates_ = c.duplicates;
      counted_batches_ = batch_record::from(c.counted_batches);
      return {};
    }
    case part_kind::first_moment:
      return values(first_moment_);
    case part_kind::second_moment:
      return values(second_moment_);
    case part_kind::mean_square:
      return values(mean_square_);
    case part_kind::round_sum:
      return values(round_sum_);
    case part_kind::read:
      if (part.worker >= read_.size())
        return make_error(errc::shape_mismatch, "a saved read copy this bucket does not keep");
      return values(read_[part.worker]);
    case part_kind::dash:
      return restore_dash(part);
    case part_kind::values:
      return make_error(errc::malformed_message, "saved values that are not ranges");
    case part_kind::rows: {
      auto* t = table(part.rows.table);
      if (!t) return make_error(errc::shape_mismatch, "saved rows of an unknown table");
      return t->restore(part.rows);
    }
    case part_kind::table_state: {
      auto* t = table(part.state.table);
      if (!t) return make_error(errc::shape_mismatch, "saved state of an unknown table");
      return t->restore_state(part.state);
    }
    case part_kind::round_rows: {
      auto* t = table(part.rows.table);
      const size_t dim = part.rows.row_dim;
      if (!t || round_rows_.empty() || dim != t->row_dim() ||
          part.rows.values.size() != part.rows.ids.size() * dim)
        return make_error(errc::shape_mismatch, "saved round rows do not match a table");
      auto& sums = round_rows_[static_cast<size_t>(t - tables_.data())];
      for (size_t i = 0; i < part.rows.ids.size(); ++i)
        sums[part.rows.ids[i]].assign(part.rows.values.begin() + i * dim,
                                      part.rows.values.begin() + (i + 1) * dim);
      return {};
    }
  }
  return make_error(errc::malformed_message, "unknown saved part");
}

caf::expected<bucket_store> bucket_store::restore(const std::vector<wire>& saved,
                                                  const update_rules& rules) {
  if (saved.empty()) return make_error(errc::malformed_message, "no saved bucket state");
  auto restorer = bucket_restorer::begin(saved[0], rules);
  if (!restorer) return std::move(restorer.error());
  for (size_t i = 1; i < saved.size(); ++i)
    if (auto err = restorer->add(saved[i])) return err;
  return restorer->finish();
}

caf::expected<bucket_restorer> bucket_restorer::begin(const wire& spec_message,
                                                      const update_rules& rules,
                                                      bool arrays_apart) {
  auto spec = decode<bucket_spec>(spec_message);
  if (!spec) return std::move(spec.error());
  if (auto err = check_rule(spec->optimizer, rules)) return err;
  const bool values_follow = spec->values_follow;  // (older checkpoints hold them in the spec)
  return bucket_restorer{bucket_store{std::move(*spec), rules}, values_follow, arrays_apart};
}

caf::expected<bucket_restorer> bucket_restorer::over(bucket_store existing, const wire& spec,
                                                     bool arrays_apart) {
  if (existing.saved_spec().bytes != spec.bytes)
    return make_error(errc::shape_mismatch, "a saved bucket of another configuration");
  return bucket_restorer{std::move(existing), true, arrays_apart};
}

caf::error bucket_restorer::add(const wire& message) {
  auto part = decode<bucket_state_part>(message);
  if (!part) return std::move(part.error());
  return store_->restore_part(std::move(*part), cursors_);
}

caf::expected<bucket_store> bucket_restorer::finish() {
  // Every kind saved in ranges came whole, the values too (the spec's follow); arrays moved
  // apart are the caller's to check.
  using part_kind = bucket_state_part::kind;
  const auto& slices = store_->slices_;
  if (!arrays_apart_) {
    if (values_follow_)
      cursors_[{static_cast<uint8_t>(part_kind::values), 0}].resize(slices.size(), 0);
    for (const auto& [kind, next] : cursors_)
      for (size_t s = 0; s < next.size(); ++s)
        if (next[s] != slices[s].values.size())
          return make_error(errc::corrupt_data,
                            fmt::format("saved state of slice {} is incomplete ({} of {} values)",
                                        s, next[s], slices[s].values.size()));
  }
  return std::move(*store_);
}

uint64_t bucket_store::rejoin(uint32_t worker) {
  if (worker >= workers_) return admit(worker);
  const uint64_t now = gate_.clock_of(worker, clock_);
  gate_.rejoin(worker, gate_.slowest(clock_).value_or(now), clock_);
  next_push_[worker] = 0;
  // A push already in this bsp round counts: the worker goes on with the next round.
  const bool in_round = !in_round_.empty() && in_round_[worker] != round_none;
  return gate_.clock_of(worker, clock_) + (in_round ? 1 : 0);
}

}  // namespace troupe
