// Delay compensation (--dc) of a bucket's dense slices and embedding rows: a push's gradient is
// corrected towards the values it would have had at the bucket's current values, from what
// the worker read (kernels/cpu/compensation.hpp).
#include "actors/bucket/bucket_store.hpp"
#include "kernels/cpu/compensation.hpp"

namespace troupe {

using dc_kind = compensation_config::kind;

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
