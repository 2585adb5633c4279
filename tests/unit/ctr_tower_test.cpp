// The ctr model's dense tower: its gradient, with respect to its weights and its input (the
// fields' embeddings), against central finite differences; and a ctr task with a tower whose
// batch gradient (dense and rows) matches finite differences of its loss.
#define BOOST_TEST_MODULE ctr_tower
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "apps/ctr/ctr_task.hpp"
#include "apps/ctr/ctr_tower.hpp"

using namespace troupe;
using namespace troupe::ctr;

namespace {

// A click log of 3 fields, 50 ids each, FM dimension 2 and a tower of 4 hidden units.
ctr_options small_log() {
  ctr_options o;
  o.fields = 3;
  o.vocabulary = 50;
  o.train = 200;
  o.test = 50;
  o.fm_dim = 2;
  o.tower = {4};
  return o;
}

// d f / d x by central differences, x moved by 1e-3 either way and put back.
template <class F>
double central_difference(float& x, F f) {
  constexpr float h = 1e-3f;
  const float keep = x;
  x = keep + h;
  const double up = f();
  x = keep - h;
  const double down = f();
  x = keep;
  return (up - down) / (2 * h);
}

}  // namespace

BOOST_AUTO_TEST_CASE(tower_gradients_match_finite_differences) {
  const tower_shape shape{6, {5, 4}};
  BOOST_TEST(tower_tensors(shape).size() == 6u);
  BOOST_TEST(tower_values(shape) == size_t(5 * 7 + 4 * 6 + 1 * 5));
  std::vector<float> params(tower_values(shape)), input{0.3f, -0.2f, 0.5f, 0.1f, -0.4f, 0.25f};
  init_tower(shape, 7, params);
  for (size_t i = 0; i < params.size(); ++i) params[i] += 0.01f * float(i % 7);  // biases too
  tower_activations acts;
  tower_forward(shape, params, input, acts);
  std::vector<float> dparams(params.size(), 0.0f), dinput(input.size(), 0.0f);
  tower_backward(shape, params, input, acts, 1.0, dparams, dinput);
  auto out = [&] {
    tower_activations a;
    return tower_forward(shape, params, input, a);
  };
  auto numeric = [&](float& x) { return central_difference(x, out); };
  for (size_t i = 0; i < params.size(); ++i)
    BOOST_TEST_REQUIRE(std::abs(numeric(params[i]) - dparams[i]) < 2e-3, "param " << i);
  for (size_t i = 0; i < input.size(); ++i)
    BOOST_TEST_REQUIRE(std::abs(numeric(input[i]) - dinput[i]) < 2e-3, "input " << i);
}

BOOST_AUTO_TEST_CASE(a_ctr_task_with_a_tower_has_the_gradient_of_its_loss) {
  const ctr_options o = small_log();
  auto task = make_ctr_task(o);
  BOOST_TEST_REQUIRE(bool(task));
  const auto specs = (*task)->parameters();
  BOOST_TEST_REQUIRE(specs.size() == 5u);  // bias, tower.0.w/b, tower.1.w/b
  size_t dense = 0;
  for (const auto& s : specs) {
    size_t n = 1;
    for (auto d : s.shape) n *= d;
    dense += n;
  }
  std::vector<float> params(dense), grad(dense);
  (*task)->initialize(3, params);
  // Hidden biases well above what the small embeddings below can move the pre-activations by:
  // no ReLU sits at its kink, where finite differences do not hold.
  for (size_t i = 1 + 4 * 6; i < 1 + 4 * 6 + 4; ++i) params[i] = 0.2f;
  auto replica = (*task)->make_replica(16, 5);
  BOOST_TEST_REQUIRE(bool(replica));
  sparse_rows_view rows;
  rows.ids = (*replica)->rows_of(0, 0);
  for (size_t t = 0; t < rows.ids.size(); ++t) {
    const size_t width = t == 0 ? 1 : 2;
    rows.values.emplace_back(rows.ids[t].size() * width);
    for (size_t i = 0; i < rows.values[t].size(); ++i)
      rows.values[t][i] = 0.01f * std::sin(float(i) + float(t));
    rows.grads.emplace_back(rows.values[t].size(), 0.0f);
  }
  BOOST_TEST_REQUIRE(bool((*replica)->gradient(params, rows, 0, 0, grad)));
  auto loss = [&] {
    auto copy = rows;
    std::vector<float> g(dense);
    return double(*(*replica)->gradient(params, copy, 0, 0, g));
  };
  auto numeric = [&](float& x) { return central_difference(x, loss); };
  for (size_t i = 0; i < dense; ++i)
    BOOST_TEST_REQUIRE(std::abs(numeric(params[i]) - grad[i]) < 1e-3, "dense " << i);
  auto& v = rows.values[1];
  for (size_t i = 0; i < v.size(); ++i)
    BOOST_TEST_REQUIRE(std::abs(numeric(v[i]) - rows.grads[1][i]) < 1e-3, "v " << i);
  ctr_options bad = o;
  bad.fm_dim = 0;
  BOOST_TEST(!make_ctr_task(bad));  // a tower needs embeddings
}

BOOST_AUTO_TEST_CASE(a_range_of_examples_is_the_batch_it_covers) {
  const ctr_options o = small_log();
  auto task = make_ctr_task(o);
  BOOST_TEST_REQUIRE(bool(task));
  auto replica = (*task)->make_replica(16, 5);
  BOOST_TEST_REQUIRE(bool(replica));
  const size_t dense = 1 + tower_values(tower_shape{6, {4}});
  std::vector<float> params(dense), by_batch(dense), by_range(dense);
  (*task)->initialize(3, params);
  auto rows_for = [&](std::vector<std::vector<uint64_t>> ids) {
    sparse_rows_view rows;
    rows.ids = std::move(ids);
    for (size_t t = 0; t < rows.ids.size(); ++t) {
      rows.values.emplace_back(rows.ids[t].size() * (t == 0 ? 1 : 2), 0.01f);
      rows.grads.emplace_back(rows.values[t].size(), 0.0f);
    }
    return rows;
  };
  const auto ids = (*replica)->rows_of(1, 2);
  BOOST_TEST((ids == (*replica)->rows_of_range(1, 32, 16)));
  auto a = rows_for(ids), b = rows_for(ids);
  auto batch_loss = (*replica)->gradient(params, a, 1, 2, by_batch);
  auto range = (*replica)->gradient_range(params, b, 1, 32, 16, by_range);
  BOOST_TEST_REQUIRE((batch_loss && range));
  BOOST_TEST(range->count == 16u);
  BOOST_TEST(std::abs(range->loss - *batch_loss) < 1e-6);
  BOOST_TEST((by_batch == by_range));
  BOOST_TEST((a.grads == b.grads));
  auto past = (*replica)->gradient_range(params, b, 1, 200, 16, by_range);
  BOOST_TEST_REQUIRE(bool(past));
  BOOST_TEST(past->count == 0u);  // the range starts at the epoch's end
}
