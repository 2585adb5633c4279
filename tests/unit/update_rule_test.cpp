// Unit tests of app update rules (troupe/update_rule.hpp): the registry's checks, a bucket that
// steps its slices and embedding rows with a rule, the rule's moments through save and restore,
// a rule that makes values non-finite (nothing changes, the push is refused), and a bucket
// without the rule. Part of the bucket_store test module (bucket_store_test.cpp).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "actors/bucket/bucket_store.hpp"
#include "tests/unit/expect_error.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::is_error;
using troupe::testing::succeeded;

namespace {

// Adagrad: m accumulates g^2, theta moves by lr g / (sqrt(m) + 1e-8).
update_rule adagrad() {
  return {"adagrad", 1, [](const update_args& a) {
            for (size_t k = 0; k < a.theta.size(); ++k) {
              a.m[k] += a.grad[k] * a.grad[k];
              a.theta[k] -= a.lr * a.grad[k] / (std::sqrt(a.m[k]) + 1e-8f);
            }
          }};
}

// Writes NaN into the first value whenever a gradient value is above 1.
update_rule breaks_on_large() {
  return {"breaks", 0, [](const update_args& a) {
            for (size_t k = 0; k < a.theta.size(); ++k) {
              a.theta[k] -= a.lr * a.grad[k];
              if (a.grad[k] > 1) a.theta[0] = std::numeric_limits<float>::quiet_NaN();
            }
          }};
}

update_rules rules_with(update_rule rule) {
  update_rules rules;
  BOOST_REQUIRE(!rules.add(std::move(rule)));
  return rules;
}

optimizer_config app_optimizer(std::string rule, float lr = 0.5f) {
  optimizer_config o;
  o.type = optimizer_config::kind::app;
  o.rule = std::move(rule);
  o.lr = lr;
  return o;
}

// One slice of three values and an embedding table of two-value rows.
bucket_spec rule_spec(const optimizer_config& o) {
  bucket_spec spec{0, 1, o, {dense_tensor{"w", {3}, 0, {1.0f, 2.0f, 3.0f}}}};
  spec.tables.push_back(table_config{"emb", 2, 0.0f, 100});
  spec.bucket_count = 1;
  return spec;
}

push_request push_of(uint64_t clock, std::vector<float> g, std::vector<float> row_grad = {}) {
  push_request push{0, 0, clock, vector_clock{}, {dense_tensor{"w", {3}, 0, std::move(g)}}};
  if (!row_grad.empty()) push.sparse.push_back(sparse_rows{"emb", 2, {5}, std::move(row_grad)});
  return push;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(app_update_rules)

BOOST_AUTO_TEST_CASE(the_registry_checks_names_moments_and_functions) {
  update_rules rules;
  BOOST_TEST(!rules.add(adagrad()));
  BOOST_TEST(is_error(rules.add(adagrad()), errc::bad_configuration));  // taken
  BOOST_TEST(is_error(rules.add({"adam", 0, adagrad().apply}), errc::bad_configuration));
  BOOST_TEST(is_error(rules.add({"Bad Name", 0, adagrad().apply}), errc::bad_configuration));
  BOOST_TEST(is_error(rules.add({"three", 3, adagrad().apply}), errc::bad_configuration));
  BOOST_TEST(is_error(rules.add({"empty", 0, {}}), errc::bad_configuration));
  BOOST_TEST(rules.find("adagrad"));
  BOOST_TEST(!rules.find("sgd"));
  BOOST_TEST(rules.names() == "adagrad");
  BOOST_TEST(update_rules{}.names() == "none");
  BOOST_TEST(!check_rule(app_optimizer("adagrad"), rules));
  BOOST_TEST(!check_rule(optimizer_config{}, update_rules{}));  // built in: always here
  BOOST_TEST(is_error(check_rule(app_optimizer("ftrl"), rules), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(a_bucket_steps_slices_and_rows_with_the_rule) {
  const auto rules = rules_with(adagrad());
  bucket_store store{rule_spec(app_optimizer("adagrad")), rules};
  BOOST_TEST_REQUIRE(succeeded(store.read_rows({row_request{"emb", {5}}})));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(0, {2.0f, -1.0f, 0.0f}, {4.0f, 0.0f}))));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(1, {2.0f, 0.0f, 0.0f}))));
  // w0: g = 2 twice: -0.5 * (2/2 + 2/sqrt(8)); w1: g = -1 then 0: +0.5; w2 unchanged.
  const auto& w = store.slices()[0].values;
  BOOST_TEST(w[0] == 1.0f - 0.5f * (1.0f + 2.0f / std::sqrt(8.0f)),
             boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w[1] == 2.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(w[2] == 3.0f);
  auto row = store.read_rows({row_request{"emb", {5}}});
  BOOST_TEST_REQUIRE(succeeded(row));
  BOOST_TEST((*row)[0].values[0] == -0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST((*row)[0].values[1] == 0.0f);
}

BOOST_AUTO_TEST_CASE(the_rule_state_survives_save_and_restore) {
  const auto rules = rules_with(adagrad());
  bucket_store store{rule_spec(app_optimizer("adagrad")), rules};
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(0, {2.0f, 1.0f, 1.0f}))));
  auto restored = bucket_store::restore(store.save(), rules);
  BOOST_TEST_REQUIRE(succeeded(restored));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(1, {2.0f, 1.0f, 1.0f}))));
  BOOST_TEST_REQUIRE(succeeded(restored->apply(push_of(1, {2.0f, 1.0f, 1.0f}))));
  BOOST_TEST(restored->slices()[0].values == store.slices()[0].values,
             boost::test_tools::per_element());
  // Without the rule the saved bucket is refused, not restored with another optimizer.
  BOOST_TEST(fails_with(bucket_store::restore(store.save()), errc::bad_configuration));
}

BOOST_AUTO_TEST_CASE(non_finite_results_change_nothing) {
  const auto rules = rules_with(breaks_on_large());
  bucket_store store{rule_spec(app_optimizer("breaks")), rules};
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(0, {0.5f, 0.5f, 0.5f}))));
  const auto before = store.slices()[0].values;
  BOOST_TEST(fails_with(store.apply(push_of(1, {0.5f, 2.0f, 0.5f})), errc::non_finite));
  BOOST_TEST(store.slices()[0].values == before, boost::test_tools::per_element());
  BOOST_TEST(store.stats().updates_rejected == 1u);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(2, {0.5f, 0.5f, 0.5f}))));  // and goes on
  BOOST_TEST(store.slices()[0].values[0] == before[0] - 0.25f);
}

// A push whose second slice the rule breaks applies nothing at all: not the first slice, not
// its rows, no update counted; the next good push applies as if the bad one never came.
BOOST_AUTO_TEST_CASE(a_refused_push_is_applied_whole_or_not_at_all) {
  const auto rules = rules_with(breaks_on_large());
  auto spec = rule_spec(app_optimizer("breaks"));
  spec.tensors.push_back(dense_tensor{"b", {2}, 0, {5.0f, 6.0f}});
  bucket_store store{spec, rules};
  BOOST_TEST_REQUIRE(succeeded(store.read_rows({row_request{"emb", {5}}})));
  const auto w_before = store.slices()[0].values;
  const auto b_before = store.slices()[1].values;
  push_request bad = push_of(0, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f});
  bad.dense.push_back(dense_tensor{"b", {2}, 0, {3.0f, 0.5f}});  // breaks slice b
  BOOST_TEST(fails_with(store.apply(bad), errc::non_finite));
  BOOST_TEST(store.slices()[0].values == w_before, boost::test_tools::per_element());
  BOOST_TEST(store.slices()[1].values == b_before, boost::test_tools::per_element());
  auto row = store.read_rows({row_request{"emb", {5}}});
  BOOST_TEST_REQUIRE(succeeded(row));
  BOOST_TEST((*row)[0].values[0] == 0.0f);
  BOOST_TEST(store.stats().updates_applied == 0u);
  BOOST_TEST(store.stats().updates_rejected == 1u);
  push_request good = push_of(1, {0.5f, 0.5f, 0.5f});
  good.dense.push_back(dense_tensor{"b", {2}, 0, {0.5f, 0.5f}});
  BOOST_TEST_REQUIRE(succeeded(store.apply(good)));
  BOOST_TEST(store.slices()[1].values[0] == 5.0f - 0.25f);
  BOOST_TEST(store.stats().updates_applied == 1u);
}

BOOST_AUTO_TEST_CASE(a_bucket_without_the_rule_refuses_pushes) {
  bucket_store store{rule_spec(app_optimizer("adagrad"))};
  const auto before = store.slices()[0].values;
  BOOST_TEST(fails_with(store.apply(push_of(0, {1.0f, 1.0f, 1.0f})), errc::bad_configuration));
  BOOST_TEST(store.slices()[0].values == before, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
