#include "apps/ctr/ctr_reference.hpp"

#include <chrono>
#include <cmath>
#include <mutex>

#include "actors/bucket/bucket_store.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/error.hpp"

namespace troupe::ctr {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

bucket_spec spec_of(const training_task& task, const flat_layout& layout, const placement& plan,
                    const reference_settings& s, std::span<const float> params) {
  bucket_spec spec;
  spec.workers = 1;
  spec.optimizer = s.optimizer;
  spec.tensors = gather(layout, plan.buckets[0], params);
  for (const auto& t : task.sparse_tables()) spec.tables.push_back(config_of(t));
  spec.bucket_count = 1;
  spec.seed = s.seed;
  spec.clip = s.clip;
  return spec;
}

// The current values of `ids` (one list per table) from `store`, with zeroed gradients, read
// by `reader`: the one worker (rows are created, admitted and evicted as in a job), or an
// observer (evaluation: nothing changes).
caf::expected<sparse_rows_view> read(bucket_store& store, const std::vector<table_spec>& tables,
                                     std::vector<std::vector<uint64_t>> ids, uint32_t reader) {
  sparse_rows_view rows;
  rows.ids = std::move(ids);
  size_rows(tables, rows);
  auto got = store.read_rows(row_requests(tables, rows, 0, 1), reader);
  (void)store.take_evictions();  // no backup to tell
  if (!got) return std::move(got.error());
  if (auto err = fill_rows(tables, *got, rows)) return err;
  return rows;
}

double figure(const std::vector<std::pair<std::string, double>>& figures, const std::string& name) {
  for (const auto& [key, value] : figures)
    if (key == name) return value;
  return nan;
}

// Every batch of every epoch, in order; then the test split's figures.
caf::expected<std::vector<std::pair<std::string, double>>> train(const training_task& task,
                                                                 const reference_settings& s) {
  const flat_layout layout(task.parameters());
  const placement plan = plan_buckets(layout, 1, 1);
  std::vector<float> params(layout.total, 0.0f), grad(layout.total, 0.0f);
  task.initialize(s.seed, params);
  bucket_store store(spec_of(task, layout, plan, s, params));
  const auto tables = task.sparse_tables();
  auto replica = task.make_replica(s.batch, s.seed);
  if (!replica) return std::move(replica.error());
  uint64_t clock = 0;
  const auto deadline = std::chrono::steady_clock::now() + s.budget;
  for (uint32_t e = 0; e < s.epochs; ++e)
    for (uint64_t b = 0; b < task.batches_per_epoch(s.batch); ++b) {
      if (std::chrono::steady_clock::now() > deadline)
        return make_error(errc::timeout,
                          "it took more than " + std::to_string(s.budget.count()) + " s; given up");
      auto rows = read(store, tables, (*replica)->rows_of(e, b), 0);
      if (!rows) return std::move(rows.error());
      const vector_clock read_clock = store.snapshot().clock;
      auto loss = (*replica)->gradient(params, *rows, e, b, grad);
      if (!loss) return std::move(loss.error());
      push_request push{0, 0, ++clock, read_clock};
      push.dense = gather(layout, plan.buckets[0], grad);
      push.sparse = row_gradients(tables, *rows, 0, 1);
      if (auto applied = store.apply(std::move(push));
          !applied && !has_code(applied.error(), errc::non_finite))
        return std::move(applied.error());
      scatter(layout, store.slices(), params);
    }
  auto rows = read(store, tables, task.evaluation_rows(), observer_worker);
  if (!rows) return std::move(rows.error());
  const auto figures = task.report_figures(params, *rows);
  return std::vector<std::pair<std::string, double>>{
      {"reference_auc", figure(figures, "test_auc")},
      {"reference_logloss", figure(figures, "test_logloss")}};
}

// Forwards everything to the task it wraps, and adds the reference to report_figures.
class reference_task : public training_task {
 public:
  reference_task(std::unique_ptr<training_task> inner, reference_settings s, logger log)
      : inner_(std::move(inner)), settings_(s), log_(std::move(log)) {}

  std::vector<tensor_spec> parameters() const override { return inner_->parameters(); }
  void initialize(uint64_t seed, std::span<float> p) const override { inner_->initialize(seed, p); }
  uint64_t batches_per_epoch(uint32_t b) const override { return inner_->batches_per_epoch(b); }
  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override {
    return inner_->make_replica(batch, seed);
  }
  evaluation evaluate(std::span<const float> p) const override { return inner_->evaluate(p); }
  std::vector<table_spec> sparse_tables() const override { return inner_->sparse_tables(); }
  std::vector<std::vector<uint64_t>> evaluation_rows() const override {
    return inner_->evaluation_rows();
  }
  evaluation evaluate(std::span<const float> p, const sparse_rows_view& rows) const override {
    return inner_->evaluate(p, rows);
  }
  std::vector<std::pair<std::string, double>> report_figures(
      std::span<const float> p, const sparse_rows_view& rows) const override {
    auto out = inner_->report_figures(p, rows);
    std::call_once(trained_, [&] { reference_ = train_reference(*inner_, settings_, log_); });
    out.insert(out.end(), reference_.begin(), reference_.end());
    return out;
  }

 private:
  std::unique_ptr<training_task> inner_;
  reference_settings settings_;
  logger log_;
  mutable std::once_flag trained_;
  mutable std::vector<std::pair<std::string, double>> reference_;
};

}  // namespace

reference_settings reference_settings_of(const launch_options& o) {
  return {optimizer_from(o), o.epochs, o.batch, o.seed, o.clip, 5 * o.request_timeout};
}

std::vector<std::pair<std::string, double>> train_reference(const training_task& task,
                                                            const reference_settings& s,
                                                            const logger& log) {
  const auto began = std::chrono::steady_clock::now();
  auto figures = train(task, s);
  if (!figures) {
    log.warn("--reference: {}", describe(figures.error()));
    return {{"reference_auc", nan}, {"reference_logloss", nan}};
  }
  log.info("--reference: sequential training to test AUC {:.4f} in {:.1f} s",
           figure(*figures, "reference_auc"),
           std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  return std::move(*figures);
}

std::unique_ptr<training_task> with_reference(std::unique_ptr<training_task> inner,
                                              reference_settings s, logger log) {
  return std::make_unique<reference_task>(std::move(inner), s, std::move(log));
}

}  // namespace troupe::ctr
