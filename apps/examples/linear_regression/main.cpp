// linear-regression: y = w.x + b + noise on generated data, as a Troupe training_task. The
// same binary trains embedded (default), or as any role of a distributed job (--role). It also
// gives the buckets an update rule of its own: --optimizer adagrad.
#include <cmath>
#include <cstdio>
#include <numeric>

#include "troupe/app.hpp"
#include "troupe/error.hpp"
#include "troupe/random.hpp"

namespace {

struct data_set {
  size_t dim = 0;
  std::vector<float> x, y;  // example i: x[i * dim ..], y[i]
  size_t size() const { return y.size(); }
};

// n examples of x ~ U(-1, 1)^dim, y = sum_j (j + 1) / dim * x_j + 0.5 + U(-0.05, 0.05).
data_set generate(size_t dim, size_t n, uint64_t seed) {
  data_set d{dim, std::vector<float>(n * dim), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) {
    double y = 0.5 + 0.1 * (troupe::unit_float(troupe::splitmix64(seed ^ (i << 20))) - 0.5);
    for (size_t j = 0; j < dim; ++j) {
      const float x = 2 * troupe::unit_float(troupe::splitmix64(seed + i * dim + j)) - 1;
      d.x[i * dim + j] = x;
      y += double(j + 1) / double(dim) * x;
    }
    d.y[i] = static_cast<float>(y);
  }
  return d;
}

// Mean squared error over `rows` of `d` (prediction w.x + b, params = w then b); adds the
// gradient of half of it into `grad` when there is one.
double mse(const data_set& d, std::span<const float> params, std::span<const uint32_t> rows,
           std::span<float> grad = {}) {
  double loss = 0;
  for (uint32_t i : rows) {
    const float* x = &d.x[size_t{i} * d.dim];
    const double err =
        std::inner_product(x, x + d.dim, params.begin(), 0.0) + params[d.dim] - d.y[i];
    loss += err * err;
    if (grad.empty()) continue;
    for (size_t j = 0; j < d.dim; ++j) grad[j] += float(err * x[j] / double(rows.size()));
    grad[d.dim] += float(err / double(rows.size()));
  }
  return rows.empty() ? 0 : loss / double(rows.size());
}

class regression_replica : public troupe::task_replica {
 public:
  regression_replica(const data_set& train, uint32_t batch, uint64_t seed)
      : train_(train), batch_(batch), seed_(seed) {}

  caf::expected<float> gradient(std::span<const float> p, uint32_t epoch, uint64_t batch,
                                std::span<float> grad) override {
    auto done = gradient_range(p, epoch, batch * batch_, batch_, grad, {});
    if (!done) return std::move(done.error());
    return float(done->loss);
  }

  caf::expected<troupe::range_result> gradient_range(std::span<const float> p, uint32_t epoch,
                                                     uint64_t first, uint32_t count,
                                                     std::span<float> grad,
                                                     const troupe::gradient_ready& ready) override {
    if (order_.empty() || epoch != epoch_) {  // every replica shuffles epoch e alike
      order_.resize(train_.size());
      std::iota(order_.begin(), order_.end(), 0u);
      troupe::shuffle(order_, troupe::epoch_seed(seed_, epoch_ = epoch));
    }
    const size_t begin = std::min<size_t>(first, order_.size());
    const size_t end = std::min<size_t>(begin + count, order_.size());
    std::fill(grad.begin(), grad.end(), 0.0f);
    const double loss = mse(train_, p, {order_.data() + begin, end - begin}, grad) / 2;
    if (ready) {  // b, then w: the whole gradient is done at once
      ready(1);
      ready(0);
    }
    return troupe::range_result{loss, end - begin};
  }

 private:
  const data_set& train_;
  uint32_t batch_;
  uint64_t seed_;
  uint32_t epoch_ = 0;
  std::vector<uint32_t> order_;
};

class regression_task : public troupe::training_task {
 public:
  regression_task(size_t dim, size_t examples, uint64_t seed)
      : train_(generate(dim, examples, seed)), test_(generate(dim, 2000, ~seed)) {}

  std::vector<troupe::tensor_spec> parameters() const override {
    return {{"w", {uint32_t(train_.dim)}}, {"b", {1}}};
  }
  void initialize(uint64_t, std::span<float> params) const override {
    std::fill(params.begin(), params.end(), 0.0f);
  }
  uint64_t batches_per_epoch(uint32_t batch) const override { return train_.size() / batch; }
  caf::expected<std::unique_ptr<troupe::task_replica>> make_replica(uint32_t batch,
                                                                    uint64_t seed) const override {
    return std::make_unique<regression_replica>(train_, batch, seed);
  }
  // accuracy carries R^2, the fraction of the test targets' variance the model explains.
  troupe::evaluation evaluate(std::span<const float> params) const override {
    std::vector<uint32_t> all(test_.size());
    std::iota(all.begin(), all.end(), 0u);
    const double mean = std::accumulate(test_.y.begin(), test_.y.end(), 0.0) / test_.size();
    double variance = 0;
    for (float y : test_.y) variance += (y - mean) * (y - mean) / test_.size();
    const double loss = mse(test_, params, all);
    return {1 - loss / variance, loss};
  }

 private:
  data_set train_, test_;
};

// Adagrad, which Troupe does not build in: m sums g^2, each value moves by lr g / sqrt(m).
troupe::update_rule adagrad() {
  return {"adagrad", 1, [](const troupe::update_args& a) {
            for (size_t k = 0; k < a.theta.size(); ++k) {
              a.m[k] += a.grad[k] * a.grad[k];
              a.theta[k] -= a.lr * a.grad[k] / (std::sqrt(a.m[k]) + a.hyper->epsilon);
            }
          }};
}

}  // namespace

int main(int argc, char** argv) {
  troupe::app_description app;
  app.name = "linear-regression";
  app.summary = "linear regression on generated data (test_accuracy is R^2)";
  app.flags = {{"dim", "D", "features per example", "16", troupe::app_flag::whole},
               {"examples", "N", "training examples", "20000", troupe::app_flag::whole}};
  app.defaults = {{"lr", "0.05"}, {"batch", "64"}, {"epochs", "3"}, {"optimizer", "sgd"}};
  app.make_task = [](const troupe::launch_options& opts)
      -> caf::expected<std::unique_ptr<troupe::training_task>> {
    auto dim = opts.app_number<uint32_t>("dim");
    auto examples = opts.app_number<uint32_t>("examples");
    if (!dim || !examples) return dim ? examples.error() : dim.error();
    if (*dim == 0 || *examples < 64)
      return troupe::make_error(troupe::errc::bad_configuration, "--dim > 0, --examples >= 64");
    return std::make_unique<regression_task>(*dim, *examples, opts.seed);
  };
  if (auto err = app.rules.add(adagrad())) {  // a name or moment count the registry refuses
    std::fprintf(stderr, "linear-regression: %s\n", troupe::describe(err).c_str());
    return 2;
  }
  return troupe::run_app(argc, argv, app);
}
