#include "actors/bucket/bucket_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "actors/bucket/app_rule_step.hpp"
#include "kernels/cpu/compression.hpp"
#include "kernels/cpu/vector_ops.hpp"
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

}  // namespace

std::optional<update_rule> rule_for(const optimizer_config& o, const update_rules& rules) {
  const update_rule* rule = o.type == opt_kind::app ? rules.find(o.rule) : nullptr;
  if (!rule) return std::nullopt;
  return *rule;
}

bucket_store::bucket_store(bucket_spec spec, const update_rules& rules)
    : config_(spec),
      id_(spec.bucket),
      workers_(spec.workers),
      optimizer_(spec.optimizer),
      rule_(rule_for(spec.optimizer, rules)),
      compensation_(spec.compensation),
      gate_(spec.consistency, spec.workers),
      slices_(std::move(spec.tensors)),
      clock_(spec.workers),
      histogram_(staleness_histogram_size, 0) {
  config_.tensors.clear();
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
    const std::vector<row_request>& requests, uint32_t worker) {
  std::vector<sparse_rows> out;
  for (const auto& r : requests) {
    auto* t = table(r.table);
    if (!t)
      return make_error(errc::shape_mismatch,
                        fmt::format("bucket {} has no table {}", id_, r.table));
    auto rows = t->read(r.ids);
    if (!rows) return std::move(rows.error());
    out.push_back(std::move(*rows));
  }
  remember_rows(worker, out);
  return out;
}

uint64_t bucket_store::apply_rows(const std::vector<sparse_rows>& rows, float lr_scale) {
  uint64_t refused = 0;
  for (const auto& r : rows) refused += table(r.name)->apply(r, lr_scale);
  return refused;
}

caf::expected<double> bucket_store::validate(const push_request& push, gradients grads) const {
  auto bad = [&](errc code, std::string what) {
    return make_error(code, fmt::format("bucket {}: {}", id_, what));
  };
  if (push.bucket != id_)
    return bad(errc::unknown_bucket, fmt::format("got a push for bucket {}", push.bucket));
  if (push.worker >= workers_)
    return bad(errc::malformed_message, fmt::format("worker {} of {}", push.worker, workers_));
  if (gate_.retired(push.worker))
    return bad(errc::malformed_message, fmt::format("worker {} has retired", push.worker));
  if (!in_round_.empty() && in_round_[push.worker] != round_none)
    return bad(errc::malformed_message,
               fmt::format("worker {} pushed twice in one bsp round", push.worker));
  if (push.read_clock.size() > workers_)
    return bad(errc::malformed_message, "read clock has more entries than workers");
  if (!push.signs.empty()) return bad(errc::shape_mismatch, "sign tensors must be expanded first");
  for (size_t i = 0; i < push.sparse.size(); ++i) {
    const auto& rows = push.sparse[i];
    const auto* t = table(rows.name);
    if (!t) return bad(errc::shape_mismatch, fmt::format("has no table {}", rows.name));
    for (size_t j = 0; j < i; ++j)
      if (push.sparse[j].name == rows.name)
        return bad(errc::malformed_message, fmt::format("table {} appears twice", rows.name));
    if (auto err = t->check(rows, max_abs_gradient)) return err;
  }
  double squares = 0;
  if (push.dense.size() != slices_.size())
    return bad(errc::shape_mismatch,
               fmt::format("holds {} slices, push has {}", slices_.size(), push.dense.size()));
  for (size_t i = 0; i < slices_.size(); ++i) {
    const auto& mine = slices_[i];
    const auto& theirs = push.dense[i];
    const auto values = grads[i];
    if (mine.name != theirs.name || mine.row_offset != theirs.row_offset ||
        mine.shape != theirs.shape || mine.values.size() != values.size())
      return bad(errc::shape_mismatch,
                 fmt::format("slice {} expects {} from row {} ({} values), got {} from row {} "
                             "({} values)",
                             i, mine.name, mine.row_offset, mine.values.size(), theirs.name,
                             theirs.row_offset, values.size()));
    const auto checked = kernels::check_gradient(values, max_abs_gradient);
    if (const auto at = checked.beyond)
      return bad(errc::non_finite, fmt::format("gradient value {} in {} (limit {:g})", values[*at],
                                               theirs.name, max_abs_gradient));
    squares += checked.squares;
  }
  return squares;
}

void bucket_store::record(uint64_t staleness) {
  max_staleness_ = std::max(max_staleness_, staleness);
  staleness_sum_ += staleness;
  ++histogram_[std::min<uint64_t>(staleness, staleness_histogram_size - 1)];
}

void bucket_store::observe_norm(const push_request& push, double dense_squares) {
  double squares = dense_squares;
  for (const auto& rows : push.sparse) squares += kernels::sum_of_squares(rows.values);
  if (norms_.size() < update_window)
    norms_.push_back(std::sqrt(squares));
  else
    norms_[next_norm_] = std::sqrt(squares);
  next_norm_ = (next_norm_ + 1) % update_window;
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

caf::error bucket_store::apply_now(push_request& push, gradients grads, uint64_t staleness) {
  auto undo = remember_for_rule(row_ids_of(push.sparse));
  uint64_t refused = 0;
  for (size_t i = 0; i < slices_.size(); ++i)
    refused += compensate_and_step(push.worker, i, grads[i], staleness) ? 0 : 1;
  const float lr_scale = optimizer_.lr_staleness ? 1.0f / (1.0f + float(staleness)) : 1.0f;
  compensate_rows(push.worker, push.sparse);
  const uint64_t rows = apply_rows(push.sparse, lr_scale);
  if (refused || rows) {  // only an app's rule refuses: the push is applied whole or not at all
    undo_rule(*undo);
    return rule_refused(refused, rows);
  }
  clock_.tick(push.worker);
  ++version_;
  ++applied_;
  record(staleness);
  return {};
}

void bucket_store::collect_round(const push_request& push, gradients grads) {
  for (size_t i = 0; i < slices_.size(); ++i) {
    auto& sum = round_sum_[i];
    const auto g = grads[i];
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += g[k];
  }
  for (const auto& rows : push.sparse) {
    const size_t t = static_cast<size_t>(table(rows.name) - tables_.data());
    for (size_t i = 0; i < rows.ids.size(); ++i) {
      auto& sum = round_rows_[t][rows.ids[i]];
      sum.resize(rows.row_dim, 0.0f);
      for (uint32_t k = 0; k < rows.row_dim; ++k) sum[k] += rows.values[i * rows.row_dim + k];
    }
  }
  in_round_[push.worker] = round_pushed;
  record(0);  // every push of a bsp round was computed from the previous round's values
}

caf::error bucket_store::finish_round_if_complete() {
  uint32_t contributors = 0;
  bool anyone = false;
  for (uint32_t w = 0; w < workers_; ++w) {
    if (in_round_[w] == round_pushed) ++contributors;
    if (in_round_[w] != round_none)
      anyone = true;
    else if (!gate_.retired(w))
      return {};  // a live worker has not pushed yet
  }
  if (!anyone) return {};
  if (contributors == 0) {  // everyone skipped this round: only the clocks move
    for (uint32_t w = 0; w < workers_; ++w)
      if (in_round_[w] == round_skipped) gate_.skip(w);
    std::fill(in_round_.begin(), in_round_.end(), round_none);
    return {};
  }
  std::vector<std::pair<size_t, std::vector<uint64_t>>> round_ids;
  for (size_t t = 0; t < tables_.size() && optimizer_.type == opt_kind::app; ++t) {
    round_ids.emplace_back(t, std::vector<uint64_t>{});
    for (const auto& [id, sum] : round_rows_[t]) round_ids.back().second.push_back(id);
  }
  auto undo = remember_for_rule(round_ids);
  uint64_t refused = 0, rows = 0;
  for (size_t i = 0; i < slices_.size(); ++i) {
    auto& sum = round_sum_[i];
    for (float& g : sum) g /= static_cast<float>(contributors);
    refused += step(i, sum, 0) ? 0 : 1;
    std::fill(sum.begin(), sum.end(), 0.0f);
  }
  for (size_t t = 0; t < tables_.size(); ++t) {
    sparse_rows average{tables_[t].name(), tables_[t].row_dim(), {}, {}};
    for (auto& [id, sum] : round_rows_[t]) {
      average.ids.push_back(id);
      for (float g : sum) average.values.push_back(g / static_cast<float>(contributors));
    }
    rows += tables_[t].apply(average, 1.0f);
    round_rows_[t].clear();
  }
  if (refused || rows) {  // an app's rule refused the round: nothing applied, the clocks move
    undo_rule(*undo);
    for (uint32_t w = 0; w < workers_; ++w)
      if (in_round_[w] != round_none) gate_.skip(w);
    std::fill(in_round_.begin(), in_round_.end(), round_none);
    rejected_ += contributors;
    return rule_refused(refused, rows);
  }
  for (uint32_t w = 0; w < workers_; ++w) {
    if (in_round_[w] == round_pushed) clock_.tick(w);
    if (in_round_[w] == round_skipped) gate_.skip(w);
  }
  std::fill(in_round_.begin(), in_round_.end(), round_none);
  ++version_;
  applied_ += contributors;
  return {};
}

caf::error bucket_store::expand_signs(push_request& push) const {
  if (push.signs.empty()) return {};
  if (!push.dense.empty() || push.signs.size() != slices_.size())
    return make_error(errc::shape_mismatch,
                      fmt::format("bucket {}: a compressed push needs one sign tensor per slice "
                                  "and nothing else",
                                  id_));
  for (size_t i = 0; i < slices_.size(); ++i) {
    auto& sign = push.signs[i];
    const auto& mine = slices_[i];
    if (sign.name != mine.name || sign.row_offset != mine.row_offset || sign.shape != mine.shape)
      return make_error(errc::shape_mismatch,
                        fmt::format("bucket {}: sign tensor {} does not match slice {} ({})", id_,
                                    i, mine.name, sign.name));
    if (!(std::abs(sign.scale) <= max_abs_gradient))
      return make_error(errc::non_finite, fmt::format("bucket {}: sign scale {}", id_, sign.scale));
    dense_tensor g{sign.name, sign.shape, sign.row_offset, std::vector<float>(mine.values.size())};
    kernels::sign_decompress(sign.bits, sign.scale, g.values);
    push.dense.push_back(std::move(g));
  }
  push.signs.clear();
  return {};
}

bool bucket_store::counts_as_step(const push_request& push) const {
  return push.bucket == id_ && push.worker < workers_ && !gate_.retired(push.worker) &&
         (in_round_.empty() || in_round_[push.worker] == round_none);
}

caf::error bucket_store::skip_step(uint32_t worker) {
  if (in_round_.empty()) {
    gate_.skip(worker);
    return {};
  }
  in_round_[worker] = round_skipped;
  return finish_round_if_complete();
}

bool bucket_store::duplicate(const push_request& push) const {
  return push.bucket == id_ && push.worker < workers_ &&
         push.worker_clock < next_push_[push.worker];
}

bool bucket_store::batches_counted(const push_request& push) const {
  return push.batches && push.bucket == id_ && push.worker < workers_ &&
         counted_batches_.overlaps(*push.batches);
}

void bucket_store::counted(const push_request& push) {
  if (push.worker < workers_) next_push_[push.worker] = push.worker_clock + 1;
  if (push.batches) counted_batches_.add(*push.batches);
}

caf::expected<push_ack> bucket_store::apply(push_request push,
                                            std::vector<std::span<const float>> views) {
  if (push.resend && duplicate(push)) return push_ack{id_, version_, 0};
  // A step that applies nothing (skipped by the worker, refused here, or of batches already
  // counted) still counts for the worker's clock, so that ssp and bsp keep in step with it.
  const bool twice = batches_counted(push);
  const bool step = counts_as_step(push);
  if (twice && !step) {  // its worker retired, or pushed this bsp round already
    ++duplicates_;
    return push_ack{id_, version_, 0};
  }
  if ((push.skipped || twice) && step) {
    counted(push);
    caf::error closed = skip_step(push.worker);  // may close a round an app's rule refuses
    ++(twice ? duplicates_ : skipped_);
    if (push.last)  // retired even when the round it closed was refused
      if (auto retired = retire(push.worker); !closed) closed = std::move(retired);
    if (closed) return closed;
    return push_ack{id_, version_, 0};
  }
  caf::error err = expand_signs(push);
  if (views.size() != push.dense.size()) {  // none given, or the signs became dense
    views.clear();
    for (const auto& t : push.dense) views.emplace_back(t.values);
  }
  double squares = 0;
  if (!err) {
    auto checked = validate(push, views);
    if (checked)
      squares = *checked;
    else
      err = std::move(checked.error());
  }
  if (err) {
    ++rejected_;
    if (counts_as_step(push)) {
      counted(push);
      skip_step(push.worker);
    }
    return err;
  }
  counted(push);
  observe_norm(push, squares);
  const uint64_t staleness = clock_.staleness_since(push.read_clock);
  if (in_round_.empty()) {
    err = apply_now(push, views, staleness);
    if (err) {  // an app's rule refused it: counted as rejected, the clock moves as for a skip
      ++rejected_;
      gate_.skip(push.worker);
    }
  } else {
    collect_round(push, views);
    err = finish_round_if_complete();
  }
  if (push.last)
    if (auto closed = retire(push.worker); !err) err = std::move(closed);
  if (err) return err;
  return push_ack{id_, version_, in_round_.empty() ? staleness : 0};
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
  return bucket_stats{
      id_,    version_,   applied_,       rejected_, max_staleness_,    staleness_sum_,
      clock_, histogram_, max_clock_gap_, skipped_,  update_variance(), duplicates_};
}

}  // namespace troupe
