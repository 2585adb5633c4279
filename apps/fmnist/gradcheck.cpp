// Checks the fmnist task's analytic gradient against central finite differences of a
// double-precision reference loss, on a few random parameters of every tensor and one small
// batch. Usage: fmnist_gradcheck [data_dir]. Exit code 0 when max relative error < 1e-2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "apps/fmnist/mlp_math.hpp"
#include "apps/fmnist/mlp_task.hpp"
#include "troupe/error.hpp"

using namespace troupe::fmnist;

namespace {

constexpr size_t batch = 16;
constexpr size_t samples_per_tensor = 25;
constexpr double eps = 1e-4;

// y = relu?(W x + b) in double, for one layer of the flat parameters.
std::vector<double> dense(const std::vector<double>& p, const dense_shape& l,
                          const std::vector<double>& x, bool with_relu) {
  std::vector<double> y(l.out);
  for (size_t o = 0; o < l.out; ++o) {
    double acc = p[l.b_offset + o];
    for (size_t i = 0; i < l.in; ++i) acc += p[l.w_offset + o * l.in + i] * x[i];
    y[o] = with_relu ? std::max(acc, 0.0) : acc;
  }
  return y;
}

// The default model's shape (784-256-128-10).
const mlp_shape& model() {
  static const mlp_shape shape = *mlp_shape::of(default_hidden);
  return shape;
}

// Mean softmax cross-entropy over the first `batch` training examples, all in double.
double reference_loss(const std::vector<double>& p, const dataset& data) {
  double total = 0;
  std::vector<float> xf(image_size);
  for (size_t n = 0; n < batch; ++n) {
    normalize_image(data.image(n), xf.data());
    std::vector<double> x(xf.begin(), xf.end());
    const auto& layers = model().layers;
    for (size_t l = 0; l < layers.size(); ++l) x = dense(p, layers[l], x, l + 1 < layers.size());
    const auto& z = x;
    double m = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double v : z) sum += std::exp(v - m);
    total += std::log(sum) + m - z[data.labels[n]];
  }
  return total / batch;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : default_data_dir;
  auto data = load_fashion_mnist(dir, batch, 0);
  if (!data) {
    std::fprintf(stderr, "%s\n", troupe::describe(data.error()).c_str());
    return 1;
  }
  const dataset train = data->train;
  fmnist_task task(std::move(data->train), dataset{}, model());
  std::vector<float> params(model().parameter_count);
  task.initialize(7, params);
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<float> small(-0.1f, 0.1f);
  for (const auto& l : model().layers)  // non-zero biases, so the check covers them too
    for (size_t o = 0; o < l.out; ++o) params[l.b_offset + o] = small(gen);

  // One worker whose single batch is the whole shard: the batch is the first `batch` examples.
  auto replica = task.make_replica(batch, 3);
  if (!replica) {
    std::fprintf(stderr, "%s\n", troupe::describe(replica.error()).c_str());
    return 1;
  }
  std::vector<float> grad(params.size());
  const float loss = *(*replica)->gradient(params, 0, 0, grad);
  std::vector<double> p(params.begin(), params.end());
  std::printf("loss: task %.6f, double reference %.6f\n", loss, reference_loss(p, train));

  double max_rel = 0;
  double max_abs = 0;
  const auto specs = task.parameters();
  for (size_t t = 0; t < specs.size(); ++t) {
    const auto& l = model().layers[t / 2];
    const size_t offset = t % 2 == 0 ? l.w_offset : l.b_offset;
    const size_t size = t % 2 == 0 ? size_t{l.in} * l.out : l.out;
    double tensor_rel = 0;
    for (size_t s = 0; s < samples_per_tensor; ++s) {
      const size_t i = offset + gen() % size;
      const double saved = p[i];
      p[i] = saved + eps;
      const double up = reference_loss(p, train);
      p[i] = saved - eps;
      const double down = reference_loss(p, train);
      p[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      const double analytic = grad[i];
      const double abs_err = std::abs(analytic - numeric);
      const double rel = abs_err / std::max({std::abs(analytic), std::abs(numeric), 1e-6});
      tensor_rel = std::max(tensor_rel, rel);
      max_abs = std::max(max_abs, abs_err);
    }
    std::printf("%-6s max relative error %.3e\n", specs[t].name.c_str(), tensor_rel);
    max_rel = std::max(max_rel, tensor_rel);
  }
  std::printf("overall: max relative error %.3e, max absolute error %.3e\n", max_rel, max_abs);
  return max_rel < 1e-2 ? 0 : 1;
}
