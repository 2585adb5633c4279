// The click-through-rate training task: logistic regression over hashed sparse features of a
// synthetic click log (click_log.hpp), with an optional factorization-machine term. Built once
// per process by make_ctr_task (from an app's make_task); the task is immutable and its const
// methods may be called from any thread. Each replica belongs to one worker thread and shares
// the training split read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "apps/ctr/click_log.hpp"
#include "apps/ctr/ctr_tower.hpp"
#include "troupe/task.hpp"

namespace troupe::ctr {

// Initial values of table v are uniform in +-fm_init_scale (table w starts at zero).
inline constexpr float fm_init_scale = 0.01f;

struct ctr_options {
  uint32_t fields = 8;
  uint32_t vocabulary = 100000;  // ids per field
  double zipf_exponent = 1.2;    // popularity of the ids of a field
  uint64_t train = 200000;       // training examples (0: a task for evaluation only)
  uint64_t test = 20000;         // test examples
  uint32_t fm_dim = 0;           // k of the model's FM term; 0: plain logistic regression
  uint64_t seed = 1;             // the click log's seed (the same in every process of a job)
  double sigma = 0.5;            // the hidden model's weights are N(0, sigma^2)
  uint32_t truth_fm_dim = 0;     // k of the hidden model's FM term; 0: none
  std::vector<uint32_t> tower;   // hidden widths of the dense tower over table v; empty: none
  bool stream = false;           // stream the training split (click_stream): `train` an epoch
  uint64_t capacity = 0;         // rows per table; 0: fields * vocabulary (every id there is)
  std::string evict = "none";    // the tables' eviction policy (table_spec's evict)
  uint32_t admit_after = 1;      // the tables' admission (table_spec's admit_after)
};

// The click log that `opts` describes.
click_log_options click_log_options_of(const ctr_options& opts);

// Dense parameters: "bias" [1], then the tower's (ctr_tower.hpp) when it has one. Sparse
// tables: "w" (row_dim 1, the per-id weights) and, when fm_dim > 0, "v" (row_dim fm_dim, the
// per-id FM factors, which are also the embeddings the tower reads), each keyed by
// feature_id(). The logit is the FM model's plus the tower's output.
class ctr_task : public training_task {
 public:
  ctr_task(click_data data, const ctr_options& opts);

  std::vector<tensor_spec> parameters() const override;

  // A zero bias and the tower's initial weights (from `seed`). Leaves `params` untouched
  // unless it is as long as parameters() says.
  void initialize(uint64_t seed, std::span<float> params) const override;

  // Batches of `batch` examples over the whole training split (the last may be smaller); when
  // streamed, over each epoch's `train` fresh examples.
  uint64_t batches_per_epoch(uint32_t batch) const override;

  // Any batch of any epoch: epoch e visits every training example in an order shuffled from
  // (seed, e), the same in every replica, in batches of `batch`. Only the sparse gradient
  // overload trains; the dense one returns NaN.
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override;

  // Without rows there is nothing to evaluate: {0, NaN}.
  evaluation evaluate(std::span<const float> params) const override;

  std::vector<table_spec> sparse_tables() const override;

  // Per table, the sorted unique ids of the test split.
  std::vector<std::vector<uint64_t>> evaluation_rows() const override;

  // Accuracy (clicked when p >= 0.5) and mean log loss over the test split; {0, NaN} when
  // `rows` does not hold the evaluation rows.
  evaluation evaluate(std::span<const float> params, const sparse_rows_view& rows) const override;

  // {"test_auc", ...}, {"truth_auc", the AUC of the true click probabilities},
  // {"test_logloss", ...}, {"truth_logloss", the mean log loss of the true probabilities}, all
  // on the test split; NaN where the rows do not fit or the test split lacks a class.
  std::vector<std::pair<std::string, double>> report_figures(
      std::span<const float> params, const sparse_rows_view& rows) const override;

 private:
  // The logit of every test example, or nothing when `rows` does not fit.
  std::vector<double> test_logits(std::span<const float> params,
                                  const sparse_rows_view& rows) const;

  std::shared_ptr<const click_log> train_;      // held in memory (empty when streamed)
  std::shared_ptr<const click_stream> stream_;  // --stream: the training split, made on demand
  std::shared_ptr<const click_log> test_;
  uint32_t fm_dim_;
  tower_shape tower_;
  table_spec table_;                // w's capacity, eviction and admission (v's too)
  std::vector<uint64_t> test_ids_;  // sorted unique ids of the test split
  double truth_auc_;                // AUC of the true click probabilities on the test split
  double truth_logloss_;            // their mean log loss: the best any model can do on average
};

// Generates the click log `opts` describes and builds the task on it. Options out of range
// come back as errc::bad_configuration naming the option.
caf::expected<std::unique_ptr<training_task>> make_ctr_task(const ctr_options& opts);

}  // namespace troupe::ctr
