// How a push becomes an update of a bucket's values: apply() checks it (duplicates, retired
// workers, shapes, bounds), counts it for the worker's clock, and applies it at once (async,
// ssp) or adds it to the bsp round; the optimizer's step on each dense slice (each
// optimizer's kernel, and for the ones that update every value on its own, delay
// compensation and the step fused block by block); and delay compensation (--dc) of slices and
// embedding rows: a gradient corrected towards the values it would have had at the bucket's
// current values, from what the worker read (kernels/cpu/optimizers.hpp, compensation.hpp).
#include <fmt/format.h>
#include "actors/bucket/elementwise_step.hpp"

#include <array>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/bucket_store.hpp"
#include "kernels/cpu/compensation.hpp"
#include "kernels/cpu/compression.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe {

using opt_kind = optimizer_config::kind;
using dc_kind = compensation_config::kind;

// -- checking and counting a push

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

// -- the step

float bucket_store::step_lr(uint64_t staleness) const {
  const auto& o = optimizer_;
  return o.lr_staleness ? o.lr / (1.0f + static_cast<float>(staleness)) : o.lr;
}

bool bucket_store::elementwise() const {
  return troupe::elementwise(optimizer_);
}

kernels::adam_hyper bucket_store::adam_step_hyper(float lr) const {
  return adam_hyper_of(optimizer_, lr, version_ + 1);
}

void bucket_store::step_elements(size_t slice, size_t first, std::span<const float> grad,
                                 float lr) {
  const auto part = [&](std::vector<float>& all) {
    return all.empty() ? std::span<float>{} : std::span<float>(all).subspan(first, grad.size());
  };
  step_elementwise(optimizer_, lr, version_ + 1, part(slices_[slice].values),
                   part(first_moment_[slice]), part(second_moment_[slice]), grad);
}

bool bucket_store::step(size_t slice, std::vector<float>& grad, uint64_t staleness) {
  auto& theta = slices_[slice].values;
  const auto& o = optimizer_;
  const float lr = step_lr(staleness);
  switch (o.type) {
    case opt_kind::sgd:
    case opt_kind::momentum:
    case opt_kind::adam:
    case opt_kind::adamw:
    case opt_kind::nesterov:
    case opt_kind::delayed_nesterov:
      step_elements(slice, 0, grad, lr);
      return true;
    case opt_kind::dash:
      if (!dash_[slice])
        kernels::adam_step(theta, first_moment_[slice], second_moment_[slice], grad,
                           {lr, o.beta1, o.beta2, o.epsilon, o.weight_decay, version_ + 1});
      else if (device_steps(slice))
        deferred_.push_back(deferred_step{slice, grad, version_ + 1, lr});  // grad may be reused
      else
        dash_resets_ += dash_[slice]->step(theta, grad, first_moment_[slice], second_moment_[slice],
                                           version_ + 1, lr);
      return true;
    case opt_kind::app:
      return step_app_rule(rule_, o, theta, first_moment_[slice], second_moment_[slice], grad,
                           version_ + 1, lr);
  }
  return true;
}

bool bucket_store::adam_dcasgd() const {
  return compensation_.type == dc_kind::dcasgd &&
         (optimizer_.type == opt_kind::adam || optimizer_.type == opt_kind::adamw);
}

bool bucket_store::compensates(uint32_t worker) const {
  return compensation_.type != dc_kind::none && !read_[worker].empty();
}

bool bucket_store::compensate_and_step(uint32_t worker, size_t slice, std::span<const float> grad,
                                       uint64_t staleness) {
  if (!elementwise()) {
    std::vector<float> whole(grad.begin(), grad.end());  // compensated and stepped as a whole
    compensate(worker, slice, 0, whole);
    return step(slice, whole, staleness);
  }
  const float lr = step_lr(staleness);
  const bool compensated = compensates(worker);
  if (compensated && adam_dcasgd()) {  // one kernel: every array streams through it once
    kernels::adam_dcasgd_step(slices_[slice].values, first_moment_[slice], second_moment_[slice],
                              grad, read_[worker][slice], compensation_.lambda,
                              adam_step_hyper(lr));
    return true;
  }
  // 16 KiB of each array per block: gradient, values, moments and the read copy stay in L1/L2
  // from the compensation to the step, so each comes from memory once. Without compensation
  // the step reads the gradient where it is.
  constexpr size_t block = 4096;
  std::array<float, block> copy;  // on the stack: no allocation per push
  for (size_t first = 0; first < grad.size(); first += block) {
    auto part = grad.subspan(first, std::min(block, grad.size() - first));
    if (compensated) {
      const std::span<float> mine{copy.data(), part.size()};
      std::copy(part.begin(), part.end(), mine.begin());
      compensate(worker, slice, first, mine);
      part = mine;
    }
    step_elements(slice, first, part, lr);
  }
  return true;
}

// -- delay compensation

void bucket_store::compensate(uint32_t worker, size_t slice, size_t first, std::span<float> grad) {
  if (compensation_.type == dc_kind::none || read_[worker].empty()) return;
  const auto now = std::span<const float>(slices_[slice].values).subspan(first, grad.size());
  const auto then = std::span<const float>(read_[worker][slice]).subspan(first, grad.size());
  const float lambda = compensation_.lambda;
  switch (compensation_.type) {
    case dc_kind::linear:
      return kernels::compensate_linear(grad, now, then, lambda);
    case dc_kind::dcasgd:
      return kernels::compensate_dcasgd(grad, now, then, lambda);
    case dc_kind::dcasgd_adaptive:
      return kernels::compensate_dcasgd_adaptive(
          grad, now, then, lambda,
          std::span<float>(mean_square_[slice]).subspan(first, grad.size()));
    case dc_kind::none:
      return;
  }
}

void bucket_store::remember_rows(uint32_t worker, const std::vector<sparse_rows>& rows) {
  if (compensation_.type == dc_kind::none || worker >= workers_ || rows.empty()) return;
  if (rows_read_.size() < workers_) rows_read_.resize(workers_);
  auto& mine = rows_read_[worker];
  mine.assign(tables_.size(), {});
  for (const auto& r : rows) {
    const sparse_table* at = table(r.name);
    if (!at) continue;
    auto& held = mine[size_t(at - tables_.data())];
    for (size_t k = 0; k < r.ids.size(); ++k)
      held[r.ids[k]].assign(r.values.begin() + k * r.row_dim,
                            r.values.begin() + (k + 1) * r.row_dim);
  }
}

void bucket_store::compensate_rows(uint32_t worker, std::vector<sparse_rows>& rows) {
  if (compensation_.type == dc_kind::none || worker >= rows_read_.size()) return;
  if (row_mean_square_.size() < tables_.size()) row_mean_square_.resize(tables_.size());
  const float lambda = compensation_.lambda;
  for (auto& r : rows) {
    sparse_table* at = table(r.name);
    if (!at) continue;
    const size_t t = size_t(at - tables_.data());
    if (rows_read_[worker].size() <= t) continue;  // it read nothing since it joined or retired
    const auto& held = rows_read_[worker][t];
    auto now = at->read(r.ids);  // rows that are pushed exist: they were read before
    if (!now) continue;
    for (size_t k = 0; k < r.ids.size(); ++k) {
      const auto then = held.find(r.ids[k]);
      if (then == held.end() || then->second.size() != r.row_dim) continue;
      auto grad = std::span<float>(r.values).subspan(k * r.row_dim, r.row_dim);
      auto theta = std::span<const float>(now->values).subspan(k * r.row_dim, r.row_dim);
      switch (compensation_.type) {
        case dc_kind::linear:
          kernels::compensate_linear(grad, theta, then->second, lambda);
          break;
        case dc_kind::dcasgd:
          kernels::compensate_dcasgd(grad, theta, then->second, lambda);
          break;
        case dc_kind::dcasgd_adaptive: {
          auto& ms = row_mean_square_[t][r.ids[k]];
          ms.resize(r.row_dim, 0.0f);
          kernels::compensate_dcasgd_adaptive(grad, theta, then->second, lambda, ms);
          break;
        }
        case dc_kind::none:
          break;
      }
    }
  }
}

}  // namespace troupe
