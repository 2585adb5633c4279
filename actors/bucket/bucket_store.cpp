#include "actors/bucket/bucket_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "actors/bucket/app_rule_step.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using opt_kind = optimizer_config::kind;
using dc_kind = compensation_config::kind;

// DASH for a matrix slice (both sides above one), none for vectors: they take AdamW.
std::optional<kernels::dash_matrix> dash_for(const dense_tensor& slice, const optimizer_config& o) {
  if (o.type != opt_kind::dash || slice.shape.size() != 2 || slice.shape[0] < 2 ||
      slice.shape[1] < 2)
    return std::nullopt;
  kernels::dash_config c;
  c.block = o.dash_block;
  c.frequency = o.dash_freq;
  c.roots.solver = o.dash_solver;
  c.adam = kernels::adam_hyper{o.lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, 1};
  c.storage = o.dash_storage;
  c.nesterov = o.dash_nesterov;
  c.roots.scaling = o.dash_scaling;
  return kernels::dash_matrix{slice.shape[0], slice.shape[1], c};
}

std::vector<std::vector<float>> zeros_like(const std::vector<dense_tensor>& slices, bool wanted) {
  std::vector<std::vector<float>> out;
  for (const auto& s : slices) out.emplace_back(wanted ? s.values.size() : 0, 0.0f);
  return out;
}

// `spec` without its tensors (copying their values would hold the model twice).
bucket_spec configuration_of(bucket_spec& spec) {
  auto tensors = std::move(spec.tensors);
  bucket_spec out = spec;
  spec.tensors = std::move(tensors);
  return out;
}

}  // namespace

std::optional<update_rule> rule_for(const optimizer_config& o, const update_rules& rules) {
  const update_rule* rule = o.type == opt_kind::app ? rules.find(o.rule) : nullptr;
  if (!rule) return std::nullopt;
  return *rule;
}

bucket_store::bucket_store(bucket_spec spec, const update_rules& rules)
    : config_(configuration_of(spec)),
      id_(spec.bucket),
      workers_(spec.workers),
      optimizer_(spec.optimizer),
      rule_(rule_for(spec.optimizer, rules)),
      compensation_(spec.compensation),
      gate_(spec.consistency, spec.workers),
      slices_(std::move(spec.tensors)),
      clock_(spec.workers),
      histogram_(staleness_histogram_size, 0) {
  config_.values_follow = false;
  if (spec.values_follow)  // a saved bucket's shapes: its values come in its saved parts
    for (auto& s : slices_) s.values.assign(numel(s.shape), 0.0f);
  next_push_.assign(workers_, 0);
  const unsigned moments = moments_of(optimizer_, rule_);
  first_moment_ = zeros_like(slices_, moments >= 1);
  second_moment_ = zeros_like(slices_, moments >= 2);
  for (const auto& s : slices_) dash_.push_back(dash_for(s, optimizer_));
  sync_threshold_ = spec.sync_threshold;
  if (compensation_.type != dc_kind::none || sync_threshold_ > 0) read_.resize(workers_);
  mean_square_ = zeros_like(slices_, compensation_.type == dc_kind::dcasgd_adaptive);
  const bool bsp = gate_.mode() == consistency_config::mode::bsp;
  round_sum_ = zeros_like(slices_, bsp);
  in_round_.assign(bsp ? workers_ : 0, round_none);
  for (auto& t : spec.tables)
    tables_.emplace_back(std::move(t), id_, spec.bucket_count, spec.seed, optimizer_, spec.clip,
                         rule_);
  if (bsp) round_rows_.resize(tables_.size());
}

delta_file bucket_store::cut_delta(uint64_t generation, uint64_t sequence, bool snapshot) {
  delta_file out{id_, generation, sequence, version_, snapshot, {}};
  for (auto& t : tables_) out.tables.push_back(t.cut(snapshot));
  return out;
}

sparse_table* bucket_store::table(const std::string& name) {
  for (auto& t : tables_)
    if (t.name() == name) return &t;
  return nullptr;
}

const sparse_table* bucket_store::table(const std::string& name) const {
  for (const auto& t : tables_)
    if (t.name() == name) return &t;
  return nullptr;
}

caf::expected<std::vector<sparse_rows>> bucket_store::read_rows(
    const std::vector<row_request>& requests, uint32_t worker, bool mirrored) {
  const row_reader reader = worker == observer_worker ? row_reader::observer
                            : mirrored                ? row_reader::mirror
                                                      : row_reader::primary;
  std::vector<sparse_rows> out;
  for (const auto& r : requests) {
    auto* t = table(r.table);
    if (!t)
      return make_error(errc::shape_mismatch,
                        fmt::format("bucket {} has no table {}", id_, r.table));
    auto rows = t->read(r.ids, reader);
    if (!rows) return std::move(rows.error());
    out.push_back(std::move(*rows));
  }
  remember_rows(worker, out);
  return out;
}

std::vector<std::string> bucket_store::table_names() const {
  std::vector<std::string> out;
  for (const auto& t : tables_) out.push_back(t.name());
  return out;
}

std::vector<row_request> bucket_store::take_evictions() {
  std::vector<row_request> out;
  for (auto& t : tables_)
    if (auto ids = t.take_evicted(); !ids.empty())
      out.push_back(row_request{t.name(), std::move(ids)});
  return out;
}

caf::error bucket_store::evict_rows(const std::vector<row_request>& evicted) {
  for (const auto& r : evicted)
    if (!table(r.table))
      return make_error(errc::shape_mismatch,
                        fmt::format("bucket {} has no table {}", id_, r.table));
  for (const auto& r : evicted) table(r.table)->evict(r.ids);
  return {};
}

uint64_t bucket_store::apply_rows(const std::vector<sparse_rows>& rows, float lr_scale) {
  uint64_t refused = 0;
  for (const auto& r : rows) refused += table(r.name)->apply(r, lr_scale);
  return refused;
}

double bucket_store::update_variance() const {
  if (norms_.size() < 2) return 0.0;
  double sum = 0, squares = 0;
  for (double x : norms_) sum += x, squares += x * x;
  const double n = double(norms_.size());
  const double mean = sum / n;
  if (mean <= 0) return 0.0;
  return std::max(0.0, squares / n - mean * mean) / (mean * mean);
}

bool bucket_store::pull_allowed(uint32_t worker, uint64_t worker_clock) const {
  return worker == observer_worker || gate_.allows(worker_clock, clock_);
}

std::vector<dense_tensor> bucket_store::changed_rows(uint32_t worker) {
  // More runs than this per slice cost more to describe than the slice itself: send it whole.
  constexpr size_t max_runs_per_slice = 64;
  std::vector<dense_tensor> out;
  for (size_t i = 0; i < slices_.size(); ++i) {
    const size_t first_run = out.size();
    const auto& now = slices_[i];
    auto& held = read_[worker][i];
    const uint32_t rows = now.shape.empty() ? 1 : now.shape[0];
    const size_t width = rows ? now.values.size() / rows : 0;
    for (uint32_t r = 0; r < rows;) {
      auto moved = [&](uint32_t row) {
        for (size_t k = row * width; k < (row + 1) * width; ++k)
          if (std::abs(now.values[k] - held[k]) > sync_threshold_) return true;
        return false;
      };
      if (!moved(r)) {
        ++r;
        continue;
      }
      uint32_t end = r + 1;
      while (end < rows && moved(end)) ++end;
      dense_tensor run{now.name, now.shape, now.row_offset + r, {}};
      if (!run.shape.empty()) run.shape[0] = end - r;
      run.values.assign(now.values.begin() + r * width, now.values.begin() + end * width);
      std::copy(run.values.begin(), run.values.end(), held.begin() + r * width);
      out.push_back(std::move(run));
      r = end;
    }
    if (out.size() - first_run > max_runs_per_slice) {
      out.resize(first_run);
      out.push_back(now);
      held = now.values;
    }
  }
  return out;
}

bucket_store::granted_pull bucket_store::grant(uint32_t worker, uint64_t worker_clock) {
  const granted_pull whole{pull_reply{id_, version_, clock_, {}}, true};
  if (worker == observer_worker || worker >= workers_) return whole;
  max_clock_gap_ = std::max(max_clock_gap_, gate_.gap(worker_clock, clock_));
  if (sync_threshold_ > 0 && !read_[worker].empty())
    return granted_pull{pull_reply{id_, version_, clock_, changed_rows(worker)}, false};
  if (!read_.empty()) {
    auto& mine = read_[worker];
    mine.resize(slices_.size());
    for (size_t i = 0; i < slices_.size(); ++i) mine[i] = slices_[i].values;
  }
  return whole;
}

pull_reply bucket_store::grant_pull(uint32_t worker, uint64_t worker_clock) {
  auto granted = grant(worker, worker_clock);
  if (granted.whole) granted.reply.tensors = slices_;
  return std::move(granted.reply);
}

uint64_t bucket_store::admit(uint32_t worker) {
  if (worker < workers_) return gate_.clock_of(worker, clock_);
  // The vector clock keeps counting real updates only (staleness stays honest); the gate
  // remembers where the newcomer's clock starts.
  const uint64_t start = gate_.slowest(clock_).value_or(0);
  workers_ = gate_.add(start) + 1;
  next_push_.resize(workers_, 0);
  if (!read_.empty()) read_.resize(workers_);
  if (!in_round_.empty()) in_round_.resize(workers_, round_none);
  return start;
}

caf::error bucket_store::retire(uint32_t worker) {
  gate_.retire(worker);
  if (worker < rows_read_.size()) rows_read_[worker].clear();
  return in_round_.empty() ? caf::error{} : finish_round_if_complete();
}

pull_reply bucket_store::snapshot() const {
  return pull_reply{id_, version_, clock_, slices_};
}

bucket_stats bucket_store::stats() const {
  bucket_stats out{id_,    version_,   applied_,       rejected_, max_staleness_,    staleness_sum_,
                   clock_, histogram_, max_clock_gap_, skipped_,  update_variance(), duplicates_};
  out.tables = tables_counted();
  return out;
}

std::vector<table_counters> bucket_store::tables_counted() const {
  std::vector<table_counters> out;
  for (const auto& t : tables_) out.push_back(t.counters());
  return out;
}

}  // namespace troupe
