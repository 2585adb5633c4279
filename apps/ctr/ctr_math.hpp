// The math of the ctr model, shared by its training replicas, its evaluation and its checks:
// the logit of one example from its rows, its gradient, the logistic loss and an exact AUC.
// Plain functions over caller-owned buffers; safe to call from any thread.
//
//   y = b + sum_i w_i + sum_{i<j} <v_i, v_j>
//     = b + sum_i w_i + 0.5 * sum_c ((sum_i v_i,c)^2 - sum_i v_i,c^2)     (Rendle 2010, eq. 5)
//   dy/dw_i = 1,  dy/dv_i,c = sum_j v_j,c - v_i,c
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::ctr {

// The model's current values: the bias, table w (one value per row) and table v (k values per
// row; empty when k is 0).
struct ctr_model_view {
  double bias = 0;
  std::span<const float> w;
  std::span<const float> v;
  uint32_t k = 0;
};

// Where one example's rows sit: w_rows[f] in table w and v_rows[f] in table v for field f
// (v_rows is ignored when k is 0).
struct example_rows {
  std::span<const uint32_t> w_rows;
  std::span<const uint32_t> v_rows;
};

// Looks up each of `ids` in `sorted_ids` (sorted, unique) and writes its position to `rows`.
// Returns false when an id is missing.
bool find_rows(std::span<const uint64_t> sorted_ids, std::span<const uint64_t> ids,
               std::span<uint32_t> rows);

// The logit y of one example. `sums` (k values) receives sum_i v_i,c for backward().
double ctr_logit(const ctr_model_view& m, const example_rows& ex, std::span<double> sums);

// Adds dlogit * dy/d(row) to the example's rows of `w_grad` and `v_grad` (laid out like the
// tables), given the `sums` that ctr_logit wrote.
void ctr_backward(const ctr_model_view& m, const example_rows& ex, std::span<const double> sums,
                  double dlogit, std::span<float> w_grad, std::span<float> v_grad);

double sigmoid(double logit);

// -log p(label | logit) = log(1 + e^y) - label * y, without overflow for large |y|.
double logistic_loss(double logit, uint8_t label);

// The probability that a random positive scores above a random negative, ties counting half
// (ranks by sorting, ties given their average rank). NaN without both classes.
double exact_auc(std::span<const double> scores, std::span<const uint8_t> labels);

// The sorted unique values of `ids`.
std::vector<uint64_t> sorted_unique(std::vector<uint64_t> ids);

}  // namespace troupe::ctr
