#include "apps/ctr/ctr_task.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "apps/ctr/ctr_math.hpp"
#include "troupe/error.hpp"
#include "troupe/random.hpp"

namespace troupe::ctr {
namespace {

constexpr uint32_t max_fm_dim = 256;
constexpr int64_t no_epoch = -1;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// Whether `rows` has one entry per table (w, then v when k > 0) with values, and grads when
// `with_grads`, sized for its ids.
bool rows_fit(const sparse_rows_view& rows, uint32_t k, bool with_grads) {
  const size_t tables = k ? 2 : 1;
  if (rows.ids.size() != tables || rows.values.size() != tables) return false;
  if (with_grads && rows.grads.size() != tables) return false;
  for (size_t t = 0; t < tables; ++t) {
    const size_t expected = rows.ids[t].size() * (t == 0 ? 1 : k);
    if (rows.values[t].size() != expected) return false;
    if (with_grads && rows.grads[t].size() != expected) return false;
  }
  return true;
}

ctr_model_view model_view(float bias, const sparse_rows_view& rows, uint32_t k) {
  const std::span<const float> v = k ? std::span<const float>(rows.values[1]) : std::span<float>{};
  return {bias, rows.values[0], v, k};
}

// The FM model's logit plus the tower's output over the example's embeddings (its rows of
// table v, concatenated into `input`).
double full_logit(const ctr_model_view& m, const tower_shape& tower, std::span<const float> params,
                  const example_rows& ex, std::span<double> sums, std::vector<float>& input,
                  tower_activations& acts) {
  double y = ctr_logit(m, ex, sums);
  if (tower.empty()) return y;
  input.resize(tower.input);
  for (size_t f = 0; f < ex.v_rows.size(); ++f)
    for (uint32_t c = 0; c < m.k; ++c) input[f * m.k + c] = m.v[size_t{ex.v_rows[f]} * m.k + c];
  return y + tower_forward(tower, params.subspan(1), input, acts);
}

// Finds the rows of the examples `examples` of `log` (those of examples[i] at i * fields in
// w_rows and v_rows). Returns false when `rows` lacks one of their ids.
bool locate(const click_log& log, std::span<const uint32_t> examples, const sparse_rows_view& rows,
            uint32_t k, std::vector<uint64_t>& ids, std::vector<uint32_t>& w_rows,
            std::vector<uint32_t>& v_rows) {
  const uint32_t f = log.fields;
  ids.resize(f);
  w_rows.resize(examples.size() * f);
  v_rows.resize(k ? examples.size() * f : 0);
  for (size_t i = 0; i < examples.size(); ++i) {
    log.ids_of(examples[i], ids);
    if (!find_rows(rows.ids[0], ids, std::span(w_rows).subspan(i * f, f))) return false;
    if (k && !find_rows(rows.ids[1], ids, std::span(v_rows).subspan(i * f, f))) return false;
  }
  return true;
}

example_rows rows_at(const std::vector<uint32_t>& w_rows, const std::vector<uint32_t>& v_rows,
                     size_t i, uint32_t fields) {
  const std::span<const uint32_t> w(w_rows), v(v_rows);
  return {w.subspan(i * fields, fields), v.empty() ? v : v.subspan(i * fields, fields)};
}

// Any batch of any epoch: the training split in the epoch's shuffled order (the same in every
// replica of a job), and scratch buffers for one batch.
class ctr_replica : public task_replica {
 public:
  ctr_replica(std::shared_ptr<const click_log> train, std::shared_ptr<const click_stream> stream,
              uint32_t k, tower_shape tower, uint32_t batch, uint64_t seed)
      : train_(std::move(train)),
        stream_(std::move(stream)),
        k_(k),
        tower_(std::move(tower)),
        batch_(batch),
        seed_(seed),
        sums_(k) {}

  caf::expected<float> gradient(std::span<const float>, uint32_t, uint64_t,
                                std::span<float>) override {
    return make_error(errc::bad_configuration,
                      "the ctr model lives in its sparse rows: it has no gradient without them");
  }

  std::vector<std::vector<uint64_t>> rows_of(uint32_t epoch, uint64_t batch) override {
    return rows_in(examples_of(epoch, batch));
  }

  std::vector<std::vector<uint64_t>> rows_of_range(uint32_t epoch, uint64_t first,
                                                   uint32_t count) override {
    return rows_in(examples_in(epoch, first, count));
  }

  // Mean log loss of the batch; errc::shape_mismatch, with the grads untouched, when `rows`
  // does not hold its rows, bad_configuration when the batch is past the end.
  caf::expected<float> gradient(std::span<const float> params, sparse_rows_view& rows,
                                uint32_t epoch, uint64_t batch, std::span<float> grad) override {
    const auto examples = examples_of(epoch, batch);
    if (examples.empty())
      return make_error(errc::bad_configuration, "ctr: a batch past the epoch's end");
    auto loss = gradient_of(params, rows, examples, grad);
    if (!loss) return std::move(loss.error());
    return static_cast<float>(*loss);
  }

  caf::expected<range_result> gradient_range(std::span<const float> params, sparse_rows_view& rows,
                                             uint32_t epoch, uint64_t first, uint32_t count,
                                             std::span<float> grad) override {
    const auto examples = examples_in(epoch, first, count);
    if (examples.empty()) return range_result{0, 0};
    auto loss = gradient_of(params, rows, examples, grad);
    if (!loss) return std::move(loss.error());
    return range_result{*loss, examples.size()};
  }

 private:
  // The sorted unique ids `examples` read, per table.
  std::vector<std::vector<uint64_t>> rows_in(std::span<const uint32_t> examples) const {
    const click_log& log = log_in_use();
    std::vector<uint64_t> ids(examples.size() * log.fields);
    for (size_t i = 0; i < examples.size(); ++i)
      log.ids_of(examples[i], std::span(ids).subspan(i * log.fields, log.fields));
    std::vector<std::vector<uint64_t>> per_table{sorted_unique(std::move(ids))};
    if (k_) per_table.push_back(per_table.front());
    return per_table;
  }

  // Mean log loss of `examples` (not empty); errc::shape_mismatch, with the grads untouched,
  // when `rows` does not hold their rows.
  caf::expected<double> gradient_of(std::span<const float> params, sparse_rows_view& rows,
                                    std::span<const uint32_t> examples, std::span<float> grad) {
    const size_t dense = 1 + tower_values(tower_);
    if (params.size() != dense || grad.size() != dense || !rows_fit(rows, k_, true))
      return make_error(errc::shape_mismatch, "ctr: parameters or rows of the wrong shape");
    const click_log& log = log_in_use();
    if (!locate(log, examples, rows, k_, ids_, w_rows_, v_rows_))
      return make_error(errc::shape_mismatch, "ctr: the rows do not hold the batch's ids");
    const ctr_model_view m = model_view(params[0], rows, k_);
    const std::span<float> v_grad = k_ ? std::span<float>(rows.grads[1]) : std::span<float>{};
    const double scale = 1.0 / static_cast<double>(examples.size());
    double loss = 0, bias_grad = 0;
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (size_t i = 0; i < examples.size(); ++i) {
      const example_rows ex = rows_at(w_rows_, v_rows_, i, log.fields);
      const double y = full_logit(m, tower_, params, ex, sums_, input_, acts_);
      const uint8_t label = log.labels[examples[i]];
      loss += logistic_loss(y, label);
      const double dy = (sigmoid(y) - label) * scale;
      bias_grad += dy;
      ctr_backward(m, ex, sums_, dy, rows.grads[0], v_grad);
      if (!tower_.empty()) embeddings_backward(params, ex, dy, grad, v_grad);
    }
    grad[0] = static_cast<float>(bias_grad);
    return loss * scale;
  }

  // The tower's gradient into grad[1..] and, through its input, into the fields' rows of v.
  void embeddings_backward(std::span<const float> params, const example_rows& ex, double dy,
                           std::span<float> grad, std::span<float> v_grad) {
    dinput_.assign(tower_.input, 0.0f);
    tower_backward(tower_, params.subspan(1), input_, acts_, dy, grad.subspan(1), dinput_);
    for (size_t f = 0; f < ex.v_rows.size(); ++f)
      for (uint32_t c = 0; c < k_; ++c)
        v_grad[size_t{ex.v_rows[f]} * k_ + c] += dinput_[f * k_ + c];
  }

  // The training examples of batch `batch` of `epoch` (none past the end).
  std::span<const uint32_t> examples_of(uint32_t epoch, uint64_t batch) {
    return examples_in(epoch, batch * batch_, batch_);
  }

  // The log examples_in() indexes: the training split, or the streamed batch it last made.
  const click_log& log_in_use() const { return stream_ ? batch_log_ : *train_; }

  // Examples first .. first + count - 1 of `epoch`'s order (fewer past the end): indices into
  // log_in_use().
  std::span<const uint32_t> examples_in(uint32_t epoch, uint64_t first, uint32_t count) {
    if (stream_) {
      batch_log_ = stream_->examples(epoch, first, count);
      order_.resize(batch_log_.size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<uint32_t>(i);
      return order_;
    }
    if (epoch_ != epoch) {
      order_.resize(train_->size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<uint32_t>(i);
      shuffle(order_, epoch_seed(seed_, epoch));
      epoch_ = epoch;
    }
    if (first >= order_.size()) return {};
    return std::span<const uint32_t>(order_).subspan(
        first, std::min<size_t>(count, order_.size() - first));
  }

  std::shared_ptr<const click_log> train_;
  std::shared_ptr<const click_stream> stream_;  // set: examples come from here, batch by batch
  click_log batch_log_;                         // streamed: the examples examples_in() made
  uint32_t k_;
  tower_shape tower_;
  uint32_t batch_;
  uint64_t seed_;
  std::vector<uint32_t> order_;  // every example index, shuffled for epoch_ (streamed: 0..n-1)
  int64_t epoch_ = no_epoch;
  std::vector<uint64_t> ids_;     // one example's ids
  std::vector<uint32_t> w_rows_;  // the batch's rows in table w, `fields` per example
  std::vector<uint32_t> v_rows_;  // the same in table v
  std::vector<double> sums_;      // sum_i v_i,c of the current example
  std::vector<float> input_;      // the tower's input for the current example
  std::vector<float> dinput_;     // its gradient
  tower_activations acts_;
};

// The sorted unique ids of every example of `log`.
std::vector<uint64_t> ids_of_log(const click_log& log) {
  std::vector<uint64_t> ids(log.size() * log.fields);
  for (size_t n = 0; n < log.size(); ++n)
    log.ids_of(n, std::span(ids).subspan(n * log.fields, log.fields));
  return sorted_unique(std::move(ids));
}

double mean_log_loss(std::span<const double> logits, std::span<const uint8_t> labels) {
  double loss = 0;
  for (size_t n = 0; n < logits.size(); ++n) loss += logistic_loss(logits[n], labels[n]);
  return loss / static_cast<double>(logits.size());
}

double truth_auc_of(const click_log& log) {
  const std::vector<double> truth(log.truth.begin(), log.truth.end());
  return exact_auc(truth, log.labels);
}

// The mean log loss of the true probabilities, kept off 0 and 1 (stored as floats, they may
// round there).
double truth_logloss_of(const click_log& log) {
  if (log.empty()) return nan;
  constexpr double margin = 1e-7;
  double loss = 0;
  for (size_t n = 0; n < log.size(); ++n) {
    const double p = std::clamp<double>(log.truth[n], margin, 1 - margin);
    loss -= std::log(log.labels[n] ? p : 1 - p);
  }
  return loss / static_cast<double>(log.size());
}

}  // namespace

click_log_options click_log_options_of(const ctr_options& opts) {
  click_log_options log;
  log.fields = opts.fields;
  log.vocabulary = opts.vocabulary;
  log.zipf_exponent = opts.zipf_exponent;
  log.train = opts.train;
  log.test = opts.test;
  log.seed = opts.seed;
  log.sigma = opts.sigma;
  log.truth_fm_dim = opts.truth_fm_dim;
  log.stream = opts.stream;
  return log;
}

ctr_task::ctr_task(click_data data, const ctr_options& opts)
    : train_(std::make_shared<const click_log>(std::move(data.train))),
      stream_(opts.stream ? std::make_shared<const click_stream>(click_log_options_of(opts))
                          : nullptr),
      test_(std::make_shared<const click_log>(std::move(data.test))),
      fm_dim_(opts.fm_dim),
      tower_{opts.fields * opts.fm_dim, opts.tower},
      table_{"w", 1, 0.0f,
             opts.capacity ? opts.capacity : uint64_t{opts.fields} * opts.vocabulary, opts.evict,
             opts.admit_after},
      test_ids_(ids_of_log(*test_)),
      truth_auc_(truth_auc_of(*test_)),
      truth_logloss_(truth_logloss_of(*test_)) {}

std::vector<tensor_spec> ctr_task::parameters() const {
  std::vector<tensor_spec> out{tensor_spec{"bias", {1}}};
  for (auto& t : tower_tensors(tower_)) out.push_back(std::move(t));
  return out;
}

void ctr_task::initialize(uint64_t seed, std::span<float> params) const {
  if (params.size() != 1 + tower_values(tower_)) return;
  params[0] = 0.0f;
  init_tower(tower_, seed, params.subspan(1));
}

uint64_t ctr_task::batches_per_epoch(uint32_t batch) const {
  const uint64_t examples = stream_ ? stream_->size() : train_->size();
  return batch ? (examples + batch - 1) / batch : 0;
}

caf::expected<std::unique_ptr<task_replica>> ctr_task::make_replica(uint32_t batch,
                                                                    uint64_t seed) const {
  if (stream_ ? stream_->size() == 0 : train_->empty())
    return make_error(errc::bad_configuration,
                      "ctr: no training examples (task built for evaluation only)");
  if (batch == 0) return make_error(errc::bad_configuration, "ctr: batch size 0");
  return std::make_unique<ctr_replica>(train_, stream_, fm_dim_, tower_, batch, seed);
}

evaluation ctr_task::evaluate(std::span<const float>) const {
  return {0, nan};
}

std::vector<table_spec> ctr_task::sparse_tables() const {
  std::vector<table_spec> tables{table_};
  if (fm_dim_) {
    table_spec v = table_;
    v.name = "v";
    v.row_dim = fm_dim_;
    v.init_scale = fm_init_scale;
    tables.push_back(std::move(v));
  }
  return tables;
}

std::vector<std::vector<uint64_t>> ctr_task::evaluation_rows() const {
  std::vector<std::vector<uint64_t>> per_table{test_ids_};
  if (fm_dim_) per_table.push_back(test_ids_);
  return per_table;
}

std::vector<double> ctr_task::test_logits(std::span<const float> params,
                                          const sparse_rows_view& rows) const {
  if (params.size() != 1 + tower_values(tower_) || !rows_fit(rows, fm_dim_, false)) return {};
  std::vector<uint32_t> all(test_->size());
  for (size_t n = 0; n < all.size(); ++n) all[n] = static_cast<uint32_t>(n);
  std::vector<uint64_t> ids;
  std::vector<uint32_t> w_rows, v_rows;
  if (!locate(*test_, all, rows, fm_dim_, ids, w_rows, v_rows)) return {};
  const ctr_model_view m = model_view(params[0], rows, fm_dim_);
  std::vector<double> sums(fm_dim_), logits(test_->size());
  std::vector<float> input;
  tower_activations acts;
  for (size_t n = 0; n < logits.size(); ++n)
    logits[n] =
        full_logit(m, tower_, params, rows_at(w_rows, v_rows, n, test_->fields), sums, input, acts);
  return logits;
}

evaluation ctr_task::evaluate(std::span<const float> params, const sparse_rows_view& rows) const {
  const std::vector<double> logits = test_logits(params, rows);
  if (logits.empty()) return {0, nan};
  uint64_t correct = 0;
  for (size_t n = 0; n < logits.size(); ++n)
    correct += (sigmoid(logits[n]) >= 0.5) == (test_->labels[n] == 1);
  return {static_cast<double>(correct) / static_cast<double>(logits.size()),
          mean_log_loss(logits, test_->labels)};
}

std::vector<std::pair<std::string, double>> ctr_task::report_figures(
    std::span<const float> params, const sparse_rows_view& rows) const {
  const std::vector<double> logits = test_logits(params, rows);
  const bool fit = !logits.empty();
  return {{"test_auc", fit ? exact_auc(logits, test_->labels) : nan},
          {"truth_auc", truth_auc_},
          {"test_logloss", fit ? mean_log_loss(logits, test_->labels) : nan},
          {"truth_logloss", truth_logloss_}};
}

caf::expected<std::unique_ptr<training_task>> make_ctr_task(const ctr_options& opts) {
  if (opts.fm_dim > max_fm_dim)
    return make_error(errc::bad_configuration, "ctr: fm_dim must be at most " +
                                                   std::to_string(max_fm_dim) + " (got " +
                                                   std::to_string(opts.fm_dim) + ")");
  if (!opts.tower.empty() && opts.fm_dim == 0)
    return make_error(errc::bad_configuration,
                      "ctr: --tower reads the embeddings of table v: give --fm-dim K too");
  if (opts.tower.size() > 8)
    return make_error(errc::bad_configuration, "ctr: --tower has at most 8 layers");
  for (uint32_t width : opts.tower)
    if (width == 0 || width > 4096)
      return make_error(errc::bad_configuration, "ctr: --tower widths must be 1 to 4096");
  auto data = make_click_log(click_log_options_of(opts));
  if (!data) return std::move(data.error());
  return std::make_unique<ctr_task>(std::move(*data), opts);
}

}  // namespace troupe::ctr
