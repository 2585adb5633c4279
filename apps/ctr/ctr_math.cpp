#include "apps/ctr/ctr_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace troupe::ctr {

bool find_rows(std::span<const uint64_t> sorted_ids, std::span<const uint64_t> ids,
               std::span<uint32_t> rows) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto it = std::lower_bound(sorted_ids.begin(), sorted_ids.end(), ids[i]);
    if (it == sorted_ids.end() || *it != ids[i]) return false;
    rows[i] = static_cast<uint32_t>(it - sorted_ids.begin());
  }
  return true;
}

double ctr_logit(const ctr_model_view& m, const example_rows& ex, std::span<double> sums) {
  double y = m.bias;
  for (uint32_t r : ex.w_rows) y += m.w[r];
  for (uint32_t c = 0; c < m.k; ++c) {
    double sum = 0, squares = 0;
    for (uint32_t r : ex.v_rows) {
      const double v = m.v[size_t{r} * m.k + c];
      sum += v;
      squares += v * v;
    }
    sums[c] = sum;
    y += 0.5 * (sum * sum - squares);
  }
  return y;
}

void ctr_backward(const ctr_model_view& m, const example_rows& ex, std::span<const double> sums,
                  double dlogit, std::span<float> w_grad, std::span<float> v_grad) {
  for (uint32_t r : ex.w_rows) w_grad[r] += static_cast<float>(dlogit);
  if (m.k == 0) return;
  for (uint32_t r : ex.v_rows) {
    const size_t at = size_t{r} * m.k;
    for (uint32_t c = 0; c < m.k; ++c)
      v_grad[at + c] += static_cast<float>(dlogit * (sums[c] - m.v[at + c]));
  }
}

double sigmoid(double logit) {
  return 1.0 / (1.0 + std::exp(-logit));
}

double logistic_loss(double logit, uint8_t label) {
  const double softplus = std::max(logit, 0.0) + std::log1p(std::exp(-std::abs(logit)));
  return softplus - (label ? logit : 0.0);
}

double exact_auc(std::span<const double> scores, std::span<const uint8_t> labels) {
  std::vector<uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0;
  uint64_t positives = 0;
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin + 1;
    while (end < order.size() && scores[order[end]] == scores[order[begin]]) ++end;
    const double rank = 0.5 * static_cast<double>(begin + 1 + end);  // ranks begin+1..end
    for (size_t i = begin; i < end; ++i) {
      if (!labels[order[i]]) continue;
      positive_rank_sum += rank;
      ++positives;
    }
    begin = end;
  }
  const uint64_t negatives = scores.size() - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - 0.5 * p * (p + 1)) / (p * static_cast<double>(negatives));
}

std::vector<uint64_t> sorted_unique(std::vector<uint64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace troupe::ctr
