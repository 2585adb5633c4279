// Unit tests of troupe::torch (troupe/torch.hpp), no actors: a libtorch MLP takes the same
// steps as troupe-fmnist's hand-written one; the flat layout (buffers first), each tensor told
// final once, a buffer's value after the forward pass; a streamed gradient (--zero-stage 2) puts
// what gradient_range writes, tensor by tensor during backward; a table's rows and their gradients
// against autograd's own; errors from user code and --device cuda without a GPU refused.
#define BOOST_TEST_MODULE torch_task
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <stdexcept>

#include "apps/fmnist/mlp_math.hpp"
#include "apps/fmnist/mlp_task.hpp"
#include "apps/fmnist/mnist_data.hpp"
#include "troupe/error.hpp"
#include "troupe/torch.hpp"

using namespace troupe;

namespace {

const std::string data_dir = "/usr/share/datasets/fashion-mnist";

// The images standardised as troupe-fmnist does (mlp_math.cpp), flat, and the labels.
torch_examples standardised(const fmnist::dataset& d) {
  const auto n = static_cast<int64_t>(d.size());
  auto pixels = torch::from_blob(const_cast<uint8_t*>(d.pixels.data()), {n, 784}, torch::kUInt8);
  const float scale = 1.0f / (255.0f * 0.3530f);
  const float shift = 0.2860f / 0.3530f;
  auto x = pixels.to(torch::kFloat32) * scale - shift;
  auto y = torch::from_blob(const_cast<uint8_t*>(d.labels.data()), {n}, torch::kUInt8);
  return tensor_examples({x}, y.to(torch::kLong));
}

torch_model mlp() {
  torch::nn::Sequential seq(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 128), torch::nn::ReLU(),
                            torch::nn::Linear(128, 10));
  return {seq.ptr(),
          [seq](const std::vector<torch::Tensor>& in) mutable { return seq->forward(in.at(0)); }};
}

double norm_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, base = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    base += b[i] * b[i];
  }
  return std::sqrt(diff / base);
}

// Linear(3, 4) -> BatchNorm1d(4) -> Linear(4, 2).
struct BnImpl : torch::nn::Module {
  torch::nn::Linear a{3, 4};
  torch::nn::BatchNorm1d norm{4};
  torch::nn::Linear b{4, 2};
  BnImpl() {
    register_module("a", a);
    register_module("norm", norm);
    register_module("b", b);
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::relu(norm(a(x)))); }
};
TORCH_MODULE(Bn);

// A table of 2-value rows beside a linear layer: out = dense(x) + rows(ids).sum(1) padded.
struct WideImpl : torch::nn::Module {
  torch_table rows{"rows", 2, 0.1};
  torch::nn::Linear dense{3, 2};
  WideImpl() {
    register_module("rows", rows);
    register_module("dense", dense);
  }
};
TORCH_MODULE(Wide);

// The Bn model on 32 random examples (its buffers lead the layout).
caf::expected<std::unique_ptr<training_task>> bn_task() {
  torch_task_options o;
  o.model = [] { return single_input_model(Bn()); };
  auto g = at::detail::createCPUGenerator(3);
  o.train = tensor_examples({torch::randn({32, 3}, g) * 3 + 1},
                            torch::randint(0, 2, {32}, g, torch::kLong));
  o.test = o.train;
  return make_torch_task(std::move(o));
}

torch_examples random_examples(int64_t n, int64_t seed) {
  auto g = at::detail::createCPUGenerator(seed);
  auto x = torch::randn({n, 3}, g);
  auto ids = torch::randint(0, 5, {n, 2}, g, torch::kLong) * 1000 + (int64_t{1} << 40);
  auto y = torch::randint(0, 2, {n}, g, torch::kLong);
  return tensor_examples({x, ids}, y);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_libtorch_mlp_steps_as_troupe_fmnists_hand_written_one) {
  torch::set_num_threads(1);
  auto train = fmnist::load_split(data_dir, "train", 64);
  auto test = fmnist::load_split(data_dir, "t10k", 100);
  BOOST_TEST_REQUIRE(bool(train));
  BOOST_TEST_REQUIRE(bool(test));
  const auto shape = fmnist::mlp_shape::of(fmnist::default_hidden);
  BOOST_TEST_REQUIRE(bool(shape));
  fmnist::fmnist_task hand(*train, *test, *shape);
  torch_task_options o;
  o.model = mlp;
  o.train = standardised(*train);
  o.test = standardised(*test);
  auto made = make_torch_task(std::move(o));
  BOOST_TEST_REQUIRE(bool(made));
  auto& torch_task = **made;
  BOOST_TEST_REQUIRE(torch_task.parameters().size() == hand.parameters().size());
  // Both from troupe-fmnist's initial parameters; every step is the whole set of 64 (so that
  // the two tasks' orders do not matter), plain SGD.
  std::vector<float> theirs(shape->parameter_count);
  hand.initialize(7, theirs);
  std::vector<float> ours = theirs, grad_ours(ours.size()), grad_theirs(ours.size());
  auto a = torch_task.make_replica(64, 7);
  auto b = hand.make_replica(64, 7);
  BOOST_TEST_REQUIRE(bool(a));
  BOOST_TEST_REQUIRE(bool(b));
  std::vector<double> losses_ours, losses_theirs;
  for (uint32_t step = 0; step < 20; ++step) {
    auto x = (*a)->gradient_range(ours, step, 0, 64, grad_ours, {});
    auto y = (*b)->gradient_range(theirs, step, 0, 64, grad_theirs, {});
    BOOST_TEST_REQUIRE(bool(x));
    BOOST_TEST_REQUIRE(bool(y));
    BOOST_TEST_REQUIRE(x->count == 64u);
    losses_ours.push_back(x->loss);
    losses_theirs.push_back(y->loss);
    for (size_t i = 0; i < ours.size(); ++i) {
      ours[i] -= 0.05f * grad_ours[i];
      theirs[i] -= 0.05f * grad_theirs[i];
    }
  }
  BOOST_TEST_INFO("first " << losses_ours.front() << " vs " << losses_theirs.front() << ", last "
                           << losses_ours.back() << " vs " << losses_theirs.back());
  BOOST_TEST(norm_relative(losses_ours, losses_theirs) < 1e-5);
  BOOST_TEST(losses_theirs.back() < losses_theirs.front());  // it learned
  const auto e1 = torch_task.evaluate(ours);
  const auto e2 = hand.evaluate(theirs);
  BOOST_TEST(std::abs(e1.loss - e2.loss) / e2.loss < 1e-4);
}

BOOST_AUTO_TEST_CASE(buffers_lead_the_layout_and_each_tensor_is_told_once) {
  auto made = bn_task();
  BOOST_TEST_REQUIRE(bool(made));
  const auto specs = (*made)->parameters();
  BOOST_TEST_REQUIRE(specs.size() == 9u);
  BOOST_TEST(specs[0].name == "norm.running_mean");
  BOOST_TEST(specs[2].name == "norm.num_batches_tracked");
  for (size_t i = 0; i < specs.size(); ++i) BOOST_TEST(specs[i].buffer == (i < 3));
  std::vector<float> params(3 * 4 + 4 + 4 + 4 + 4 * 2 + 2 + 4 + 4 + 1);
  (*made)->initialize(5, params);
  BOOST_TEST(params[4] == 1.0f);  // running_var starts at 1
  auto replica = (*made)->make_replica(16, 5);
  BOOST_TEST_REQUIRE(bool(replica));
  std::vector<float> grad(params.size());
  for (int step = 0; step < 2; ++step) {
    std::vector<size_t> told;
    auto done = (*replica)->gradient_range(params, 0, 16 * step, 16, grad,
                                           [&](size_t t) { told.push_back(t); });
    BOOST_TEST_REQUIRE(bool(done));
    std::vector<size_t> sorted = told;
    std::sort(sorted.begin(), sorted.end());
    BOOST_TEST(sorted == (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
    if (step == 1) BOOST_TEST(told.front() >= 7u);  // overlapped: the last layer first
    BOOST_TEST(grad[8] == 1.0f);                    // one batch tracked, from the 0 it was given
    BOOST_TEST(std::abs(grad[0]) + std::abs(grad[1]) > 0.0f);  // the mean moved off 0
  }
}

BOOST_AUTO_TEST_CASE(a_streamed_gradient_puts_each_tensor_once_with_gradient_ranges_values) {
  auto made = bn_task();
  BOOST_TEST_REQUIRE(bool(made));
  std::vector<float> params(3 * 4 + 4 + 4 + 4 + 4 * 2 + 2 + 4 + 4 + 1);
  (*made)->initialize(5, params);
  auto whole = (*made)->make_replica(16, 5);
  auto streamed = (*made)->make_replica(16, 5);
  BOOST_TEST_REQUIRE(bool(whole));
  BOOST_TEST_REQUIRE(bool(streamed));
  BOOST_TEST((*streamed)->streams_gradients());
  std::vector<uint64_t> offsets{0};
  for (const auto& spec : (*made)->parameters()) {
    uint64_t n = 1;
    for (auto d : spec.shape) n *= d;
    offsets.push_back(offsets.back() + n);
  }
  for (int step = 0; step < 2; ++step) {
    std::vector<float> expected(params.size()), got(params.size(), -7.0f);
    BOOST_TEST_REQUIRE(bool((*whole)->gradient_range(params, 0, 16 * step, 16, expected, {})));
    std::vector<size_t> put;
    auto done = (*streamed)->gradient_range_streamed(
        params, 0, 16 * step, 16, [&](size_t t, std::span<const float> values) {
          put.push_back(t);
          BOOST_TEST_REQUIRE(values.size() == offsets[t + 1] - offsets[t]);
          std::copy(values.begin(), values.end(), got.begin() + offsets[t]);
        });
    BOOST_TEST_REQUIRE(bool(done));
    std::vector<size_t> sorted = put;
    std::sort(sorted.begin(), sorted.end());
    BOOST_TEST(sorted == (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
    if (step == 1) BOOST_TEST(put.front() >= 7u);  // during backward: the last layer first
    for (size_t i = 0; i < params.size(); ++i) BOOST_TEST_REQUIRE(got[i] == expected[i]);
  }
}

BOOST_AUTO_TEST_CASE(a_tables_rows_and_their_gradients_are_autograds) {
  torch_task_options o;
  o.model = [] {
    Wide w;
    return torch_model{w.ptr(), [w](const std::vector<torch::Tensor>& in) mutable {
                         auto picked = w->rows(in.at(1)).sum(1);  // batch x 2
                         return w->dense(in.at(0)) + picked;
                       }};
  };
  o.train = random_examples(32, 1);
  o.test = random_examples(16, 2);
  o.ids = [](const std::vector<torch::Tensor>& in) {
    return std::map<std::string, torch::Tensor>{{"rows", in.at(1)}};
  };
  auto made = make_torch_task(o);
  BOOST_TEST_REQUIRE(bool(made));
  BOOST_TEST_REQUIRE((*made)->sparse_tables().size() == 1u);
  BOOST_TEST((*made)->sparse_tables()[0].row_dim == 2u);
  std::vector<float> params(3 * 2 + 2), grad(params.size());
  (*made)->initialize(3, params);
  auto replica = (*made)->make_replica(16, 7);
  BOOST_TEST_REQUIRE(bool(replica));
  sparse_rows_view rows;
  rows.ids = (*replica)->rows_of_range(0, 0, 16);
  BOOST_TEST_REQUIRE(rows.ids.size() == 1u);
  BOOST_TEST_REQUIRE(!rows.ids[0].empty());
  BOOST_TEST(std::is_sorted(rows.ids[0].begin(), rows.ids[0].end()));
  const auto n = static_cast<int64_t>(rows.ids[0].size());
  auto values = torch::randn({n, 2});
  rows.values = {std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + 2 * n)};
  rows.grads = {std::vector<float>(2 * n, 0.0f)};
  auto done = (*replica)->gradient_range(params, rows, 0, 0, 16, grad);
  BOOST_TEST_REQUIRE(bool(done));
  // The same by hand: the rows as a leaf, the epoch's first 16 examples.
  auto order = torch::randperm(32, at::detail::createCPUGenerator(7 * 1'000'003), torch::kLong);
  auto batch = o.train.fetch(order.narrow(0, 0, 16));
  auto leaf = values.clone().requires_grad_(true);
  auto held = torch::from_blob(rows.ids[0].data(), {n}, torch::kLong);
  auto at = torch::searchsorted(held, batch.inputs[1].reshape(-1));
  auto w = torch::from_blob(params.data(), {2, 3}).clone();
  auto bias = torch::from_blob(params.data() + 6, {2}).clone();
  auto out =
      torch::addmm(bias, batch.inputs[0], w.t()) + leaf.index_select(0, at).view({16, 2, 2}).sum(1);
  auto loss = torch::nn::functional::cross_entropy(out, batch.target);
  loss.backward();
  BOOST_TEST(std::abs(done->loss - loss.item<double>()) < 1e-5);
  auto got = torch::from_blob(rows.grads[0].data(), {n, 2});
  BOOST_TEST((got - leaf.grad()).norm().item<double>() / leaf.grad().norm().item<double>() < 1e-6);
  // In --mode dp (no rows) the model refuses, and an id it was not given fails the step.
  auto dense = (*replica)->gradient_range(params, 0, 0, 16, grad, {});
  BOOST_TEST(!dense);
  BOOST_TEST(has_code(dense.error(), errc::task_failed));
  rows.ids[0].pop_back();
  rows.values[0].resize(rows.values[0].size() - 2);
  rows.grads[0].resize(rows.grads[0].size() - 2);
  auto missing = (*replica)->gradient_range(params, rows, 0, 0, 16, grad);
  BOOST_TEST(!missing);
  BOOST_TEST(describe(missing.error()).find("did not name") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(errors_are_values) {
  torch_task_options o;
  o.model = [] {
    torch::nn::Linear lin(3, 2);
    return torch_model{lin.ptr(), [](const std::vector<torch::Tensor>&) -> torch::Tensor {
                         throw std::runtime_error("the user's forward broke");
                       }};
  };
  o.train = random_examples(8, 1);
  o.test = o.train;
  auto made = make_torch_task(o);
  BOOST_TEST_REQUIRE(bool(made));
  std::vector<float> params(8), grad(8);
  auto replica = (*made)->make_replica(4, 1);
  BOOST_TEST_REQUIRE(bool(replica));
  auto done = (*replica)->gradient_range(params, 0, 0, 4, grad, {});
  BOOST_TEST(!done);
  BOOST_TEST(has_code(done.error(), errc::task_failed));
  BOOST_TEST(describe(done.error()).find("the user's forward broke") != std::string::npos);
  BOOST_TEST(std::isnan((*made)->evaluate(params).loss));

  torch_task_options none;
  BOOST_TEST(!make_torch_task(none));
  o.model = [] { return torch_model{}; };
  BOOST_TEST(!make_torch_task(o));

  if (!torch::cuda::is_available()) {
    auto opts = parse_launch_options(
        {"--device", "cuda"}, [](const std::string&) { return std::optional<std::string>{}; },
        torch_flags());
    BOOST_TEST_REQUIRE(bool(opts));
    torch_task_options with_device;
    auto err = apply_torch_flags(*opts, with_device);
    BOOST_TEST(has_code(err, errc::bad_configuration));
    BOOST_TEST(describe(err).find("no usable GPU") != std::string::npos);
  }
}
