// Unit tests of one bucket's state without an actor around it: the consistency rule
// (clock_gate: async, ssp:S, bsp, retirement, gap), the bucket_store's pull gating and clock-gap
// counter under ssp, bsp rounds (collect, average, retire), delay compensation (linear, dcasgd,
// adaptive), the staleness-scaled learning rate, the four optimizers against double-precision
// formulas written here, the staleness histogram, and each batch applied at most once whichever
// worker pushes it. Plain SGD is used wherever the effect of one rule should be visible in the
// values on its own.
#define BOOST_TEST_MODULE bucket_store
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/clock_gate.hpp"
#include "kernels/cpu/compression.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::succeeded;

namespace {

using opt_kind = optimizer_config::kind;
using mode = consistency_config::mode;
using dc_kind = compensation_config::kind;

constexpr double tolerance = 1e-5;

vector_clock clock_of(std::vector<uint64_t> entries) {
  return vector_clock{std::move(entries)};
}

// -- clock_gate helpers -------------------------------------------------------------------------

clock_gate gate(mode type, uint32_t bound, uint32_t workers = 2) {
  return clock_gate{consistency_config{type, bound}, workers};
}

// -- bucket_store helpers -----------------------------------------------------------------------

// Two slices (4 + 3 values), so that per-slice bookkeeping is exercised; tests work on the
// values of both slices laid end to end.
bucket_spec spec_of(uint32_t workers, optimizer_config opt, consistency_config consistency = {},
                    compensation_config compensation = {}) {
  bucket_spec spec{3, workers, opt, {}, consistency, compensation};
  spec.tensors.push_back(dense_tensor{"w", {2, 2}, 0, {0.5f, -1.0f, 2.0f, 0.25f}});
  spec.tensors.push_back(dense_tensor{"b", {3}, 0, {0.1f, -0.2f, 0.3f}});
  return spec;
}

optimizer_config sgd(float lr = 0.1f) {
  optimizer_config opt;
  opt.type = opt_kind::sgd;
  opt.lr = lr;
  return opt;
}

std::vector<double> flat(const std::vector<dense_tensor>& tensors) {
  std::vector<double> out;
  for (const auto& t : tensors) out.insert(out.end(), t.values.begin(), t.values.end());
  return out;
}

std::vector<double> values_of(const bucket_store& store) {
  return flat(store.slices());
}

// A deterministic, non-zero gradient that differs per worker and per step; the gradients of
// workers 0 and 1 point in opposite directions but do not cancel out when averaged.
std::vector<float> gradient(uint32_t worker, int step) {
  std::vector<float> g(7);
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = (worker % 2 ? -0.75f : 1.0f) * (0.2f + 0.1f * static_cast<float>(i)) +
           0.05f * static_cast<float>(step);
  return g;
}

// Each push a worker sends carries its own clock, one higher than its last: a bucket takes a
// push with an older clock for a resend and does not apply it again. Never reset, so clocks
// only grow within any one test.
uint64_t next_push_clock(uint32_t worker) {
  static std::vector<uint64_t> clocks(64, 0);
  return clocks.at(worker)++;
}

// A push of `g` (the values of both slices end to end) shaped like `spec`'s slices.
push_request push_of(const bucket_spec& spec, uint32_t worker, const std::vector<float>& g,
                     vector_clock read = {}, bool last = false) {
  push_request push{spec.bucket, worker, next_push_clock(worker), std::move(read), {}, {},
                    {},          last};
  size_t k = 0;
  for (const auto& t : spec.tensors) {
    dense_tensor slice = t;
    for (auto& x : slice.values) x = g[k++];
    push.dense.push_back(std::move(slice));
  }
  return push;
}

bool close(double actual, double expected) {
  return std::abs(actual - expected) <= tolerance + tolerance * std::abs(expected);
}

// Checks every value against `expected`; reports the first mismatch only.
void check_values(const std::vector<double>& actual, const std::vector<double>& expected) {
  BOOST_TEST_REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!close(actual[i], expected[i])) {
      BOOST_TEST(close(actual[i], expected[i]),
                 "value [" << i << "] = " << actual[i] << ", expected " << expected[i]);
      return;
    }
  }
}

// Whether any value differs from `other` by clearly more than the tolerance.
bool differs(const std::vector<double>& a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > 100 * tolerance) return true;
  return false;
}

}  // namespace

// -- clock_gate ---------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(gate_async_always_allows) {
  const auto g = gate(mode::async, 0);
  BOOST_TEST(g.allows(0, clock_of({0, 0})));
  BOOST_TEST(g.allows(1000, clock_of({0, 0})));
  BOOST_TEST(g.allows(1000, vector_clock{}));
}

BOOST_AUTO_TEST_CASE(gate_ssp_allows_up_to_slowest_plus_bound) {
  const auto g = gate(mode::ssp, 2);
  BOOST_TEST(g.allows(3, clock_of({7, 3})));
  BOOST_TEST(g.allows(5, clock_of({7, 3})));
  BOOST_TEST(!g.allows(6, clock_of({7, 3})));
  BOOST_TEST(g.allows(5, clock_of({3, 7})));  // the slowest, whichever it is
  BOOST_TEST(!g.allows(6, clock_of({3, 7})));
}

BOOST_AUTO_TEST_CASE(gate_ssp_counts_missing_clock_entries_as_zero) {
  const auto g = gate(mode::ssp, 1);
  BOOST_TEST(g.allows(1, clock_of({5})));  // worker 1 has no entry yet: applied 0
  BOOST_TEST(!g.allows(2, clock_of({5})));
}

BOOST_AUTO_TEST_CASE(gate_bsp_is_bound_zero) {
  const auto g = gate(mode::bsp, 3);  // a bound given with bsp is ignored
  BOOST_TEST((g.mode() == mode::bsp));
  BOOST_TEST(g.allows(2, clock_of({2, 2})));
  BOOST_TEST(!g.allows(3, clock_of({2, 2})));
  BOOST_TEST(!g.allows(2, clock_of({2, 1})));
}

BOOST_AUTO_TEST_CASE(gate_retired_workers_do_not_hold_others_back) {
  auto g = gate(mode::ssp, 1);
  const auto applied = clock_of({10, 0});
  BOOST_TEST(!g.allows(10, applied));
  g.retire(1);
  BOOST_TEST(g.retired(1));
  BOOST_TEST(!g.retired(0));
  BOOST_TEST(g.live() == 1u);
  BOOST_TEST(g.allows(11, applied));  // now worker 0 is the slowest live one
  BOOST_TEST(!g.allows(12, applied));
}

BOOST_AUTO_TEST_CASE(gate_all_retired_allows_everything) {
  auto g = gate(mode::bsp, 0);
  g.retire(0);
  g.retire(1);
  BOOST_TEST(g.live() == 0u);
  BOOST_TEST(g.allows(1000, clock_of({0, 0})));
  BOOST_TEST(g.gap(1000, clock_of({0, 0})) == 0u);
}

BOOST_AUTO_TEST_CASE(gate_retiring_an_unknown_worker_changes_nothing) {
  auto g = gate(mode::ssp, 0);
  g.retire(7);
  BOOST_TEST(!g.retired(7));
  BOOST_TEST(g.live() == 2u);
  BOOST_TEST(!g.allows(1, clock_of({1, 0})));
}

BOOST_AUTO_TEST_CASE(gate_gap_is_the_lead_over_the_slowest_live_worker) {
  auto g = gate(mode::ssp, 5);
  const auto applied = clock_of({4, 1});
  BOOST_TEST(g.gap(4, applied) == 3u);
  BOOST_TEST(g.gap(1, applied) == 0u);
  BOOST_TEST(g.gap(0, applied) == 0u);  // behind the slowest: no gap
  g.retire(1);
  BOOST_TEST(g.gap(4, applied) == 0u);
  BOOST_TEST(g.gap(6, applied) == 2u);
}

// -- ssp through the store ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(ssp_pull_is_refused_until_the_slow_worker_pushes) {
  const auto spec = spec_of(2, sgd(), {mode::ssp, 1});
  bucket_store store{spec};
  BOOST_TEST(store.pull_allowed(0, 0));
  store.grant_pull(0, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, 0)))));
  BOOST_TEST(store.pull_allowed(0, 1));  // one ahead of worker 1: within the bound
  store.grant_pull(0, 1);
  BOOST_TEST(store.stats().max_clock_gap == 1u);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, 1)))));
  BOOST_TEST(!store.pull_allowed(0, 2));  // two ahead: held back
  BOOST_TEST(store.pull_allowed(1, 0));   // the slow worker itself may read
  store.grant_pull(1, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, 0)))));
  BOOST_TEST(store.pull_allowed(0, 2));
  store.grant_pull(0, 2);
  BOOST_TEST(!store.pull_allowed(0, 3));
  BOOST_TEST(store.stats().max_clock_gap == 1u);
}

// Worker 0 tries to read and push on every tick, worker 1 on every third; a pull is granted
// only when allowed. The recorded clock gap reaches the bound and never exceeds it.
void run_fast_and_slow_workers(uint32_t bound) {
  const auto spec = spec_of(2, sgd(0.01f), {mode::ssp, bound});
  bucket_store store{spec};
  uint64_t clocks[2] = {0, 0};
  int refused = 0;
  for (int tick = 0; tick < 60; ++tick) {
    for (uint32_t w = 0; w < 2; ++w) {
      if (w == 1 && tick % 3 != 0) continue;
      if (!store.pull_allowed(w, clocks[w])) {
        ++refused;
        continue;
      }
      store.grant_pull(w, clocks[w]);
      BOOST_TEST_REQUIRE(store.stats().max_clock_gap <= bound);
      BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, w, gradient(w, tick)))));
      ++clocks[w];
    }
  }
  BOOST_TEST(refused > 0);
  BOOST_TEST(store.stats().max_clock_gap == bound);
  BOOST_TEST(clocks[0] <= clocks[1] + bound + 1);
}

BOOST_AUTO_TEST_CASE(ssp1_max_clock_gap_never_exceeds_the_bound) {
  run_fast_and_slow_workers(1);
}

BOOST_AUTO_TEST_CASE(ssp3_max_clock_gap_never_exceeds_the_bound) {
  run_fast_and_slow_workers(3);
}

BOOST_AUTO_TEST_CASE(ssp_retired_worker_no_longer_holds_back_pulls) {
  const auto spec = spec_of(2, sgd(), {mode::ssp, 1});
  bucket_store store{spec};
  for (int i = 0; i < 2; ++i)
    BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, i)))));
  BOOST_TEST(!store.pull_allowed(0, 2));
  store.retire(1);
  BOOST_TEST(store.pull_allowed(0, 2));
}

BOOST_AUTO_TEST_CASE(observer_pulls_are_always_allowed_and_leave_no_clock_gap) {
  const auto spec = spec_of(2, sgd(), {mode::ssp, 1});
  bucket_store store{spec};
  for (int i = 0; i < 5; ++i)
    BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, i)))));
  BOOST_TEST(!store.pull_allowed(0, 5));
  BOOST_TEST(store.pull_allowed(observer_worker, 5));
  BOOST_TEST(store.pull_allowed(observer_worker, 1000));
  const auto reply = store.grant_pull(observer_worker, 1000);
  BOOST_TEST(flat(reply.tensors) == values_of(store), boost::test_tools::per_element());
  BOOST_TEST(reply.version == 5u);
  BOOST_TEST(store.stats().max_clock_gap == 0u);
}

BOOST_AUTO_TEST_CASE(observer_pulls_leave_no_compensation_memory) {
  const auto spec = spec_of(2, sgd(), {}, {dc_kind::linear, 0.5f});
  bucket_store store{spec};
  store.grant_pull(observer_worker, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, 0)))));
  const auto before = values_of(store);
  const auto g = gradient(0, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g))));
  std::vector<double> expected(before.size());
  for (size_t i = 0; i < g.size(); ++i) expected[i] = before[i] - 0.1 * g[i];  // uncompensated
  check_values(values_of(store), expected);
}

BOOST_AUTO_TEST_CASE(observer_pulls_do_not_overwrite_a_workers_read) {
  const auto spec = spec_of(2, sgd(), {}, {dc_kind::linear, 1.0f});
  bucket_store store{spec};
  const auto read = flat(store.grant_pull(0, 0).tensors);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, 0)))));
  store.grant_pull(observer_worker, 0);
  const auto now = values_of(store);
  const auto g = gradient(0, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g))));
  std::vector<double> expected(now.size());
  for (size_t i = 0; i < g.size(); ++i)
    expected[i] = now[i] - 0.1 * (g[i] + 1.0 * (now[i] - read[i]));
  check_values(values_of(store), expected);
}

// -- bsp ----------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bsp_first_push_of_a_round_changes_nothing) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  const auto initial = values_of(store);
  const auto ack = store.apply(push_of(spec, 0, gradient(0, 0)));
  BOOST_TEST_REQUIRE(succeeded(ack));
  BOOST_TEST(ack->version == 0u);
  BOOST_TEST(values_of(store) == initial, boost::test_tools::per_element());
  const auto stats = store.stats();
  BOOST_TEST(stats.version == 0u);
  BOOST_TEST(stats.updates_applied == 0u);
  BOOST_TEST(stats.clock.sum() == 0u);
}

BOOST_AUTO_TEST_CASE(bsp_second_push_applies_the_average_in_one_step) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  const auto initial = values_of(store);
  const auto g0 = gradient(0, 0), g1 = gradient(1, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g0))));
  const auto ack = store.apply(push_of(spec, 1, g1));
  BOOST_TEST_REQUIRE(succeeded(ack));
  BOOST_TEST(ack->version == 1u);
  std::vector<double> expected(initial.size());
  for (size_t i = 0; i < g0.size(); ++i)
    expected[i] = initial[i] - 0.1 * (double(g0[i]) + double(g1[i])) / 2;
  check_values(values_of(store), expected);
  const auto stats = store.stats();
  BOOST_TEST(stats.version == 1u);
  BOOST_TEST(stats.updates_applied == 2u);
  BOOST_TEST(stats.clock.at(0) == 1u);
  BOOST_TEST(stats.clock.at(1) == 1u);
}

BOOST_AUTO_TEST_CASE(bsp_records_staleness_zero) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  for (int round = 0; round < 2; ++round) {
    for (uint32_t w = 0; w < 2; ++w) {
      // Round 2 claims to have read the initial clock: two updates old, still staleness 0.
      const auto ack = store.apply(push_of(spec, w, gradient(w, round), vector_clock{}));
      BOOST_TEST_REQUIRE(succeeded(ack));
      BOOST_TEST(ack->staleness == 0u);
    }
  }
  const auto stats = store.stats();
  BOOST_TEST(stats.max_staleness == 0u);
  BOOST_TEST(stats.staleness_sum == 0u);
  BOOST_TEST(stats.staleness_histogram.at(0) == 4u);
}

BOOST_AUTO_TEST_CASE(bsp_rounds_take_the_full_step_under_lr_staleness) {
  auto opt = sgd();
  opt.lr_staleness = true;  // every bsp push has staleness 0: nothing to scale
  const auto spec = spec_of(2, opt, {mode::bsp, 0});
  bucket_store store{spec};
  const auto initial = values_of(store);
  const auto g0 = gradient(0, 0), g1 = gradient(1, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g0, vector_clock{}))));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, g1, vector_clock{}))));
  std::vector<double> expected(initial.size());
  for (size_t i = 0; i < g0.size(); ++i)
    expected[i] = initial[i] - 0.1 * (double(g0[i]) + double(g1[i])) / 2;
  check_values(values_of(store), expected);
}

BOOST_AUTO_TEST_CASE(bsp_second_push_of_a_worker_in_one_round_is_rejected) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  const auto initial = values_of(store);
  const auto g0 = gradient(0, 0), g1 = gradient(1, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g0))));
  BOOST_TEST(fails_with(store.apply(push_of(spec, 0, gradient(0, 1))), errc::malformed_message));
  BOOST_TEST(store.stats().updates_rejected == 1u);
  BOOST_TEST(values_of(store) == initial, boost::test_tools::per_element());
  // The round still completes with worker 0's first push only.
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, g1))));
  std::vector<double> expected(initial.size());
  for (size_t i = 0; i < g0.size(); ++i)
    expected[i] = initial[i] - 0.1 * (double(g0[i]) + double(g1[i])) / 2;
  check_values(values_of(store), expected);
}

BOOST_AUTO_TEST_CASE(bsp_retiring_a_worker_that_has_not_pushed_completes_the_round) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  const auto initial = values_of(store);
  const auto g0 = gradient(0, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g0))));
  store.retire(1);
  std::vector<double> expected(initial.size());
  for (size_t i = 0; i < g0.size(); ++i) expected[i] = initial[i] - 0.1 * g0[i];  // mean of one
  check_values(values_of(store), expected);
  BOOST_TEST(store.stats().version == 1u);
  BOOST_TEST(store.stats().updates_applied == 1u);
  BOOST_TEST(store.pull_allowed(0, 1));
}

BOOST_AUTO_TEST_CASE(bsp_pull_waits_for_the_round_to_complete) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, 0)))));
  BOOST_TEST(!store.pull_allowed(0, 1));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, 0)))));
  BOOST_TEST(store.pull_allowed(0, 1));
  BOOST_TEST(store.pull_allowed(1, 1));
  BOOST_TEST(!store.pull_allowed(0, 2));
}

BOOST_AUTO_TEST_CASE(bsp_a_last_push_retires_its_worker) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  const auto g0 = gradient(0, 0), g1 = gradient(1, 0), g1b = gradient(1, 1);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g0, {}, /*last=*/true))));
  BOOST_TEST(store.stats().version == 0u);  // worker 1 has not pushed this round yet
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, g1))));
  BOOST_TEST(store.stats().version == 1u);
  // From now on worker 1 completes every round on its own.
  const auto before = values_of(store);
  const auto ack = store.apply(push_of(spec, 1, g1b));
  BOOST_TEST_REQUIRE(succeeded(ack));
  BOOST_TEST(ack->version == 2u);
  std::vector<double> expected(before.size());
  for (size_t i = 0; i < g1b.size(); ++i) expected[i] = before[i] - 0.1 * g1b[i];
  check_values(values_of(store), expected);
  BOOST_TEST(store.pull_allowed(1, 2));
  BOOST_TEST(fails_with(store.apply(push_of(spec, 0, g0)), errc::malformed_message));
}

// -- delay compensation -------------------------------------------------------------------------

// Worker 0 reads, worker 1 pushes (the values move), worker 0 pushes g. Returns the values
// worker 0 read, the values just before its push, its gradient, and the values after it.
struct stale_push {
  std::vector<double> read, now, after;
  std::vector<float> g;
};

stale_push push_after_a_peer(bucket_store& store, const bucket_spec& spec, bool pull_first) {
  stale_push out;
  if (pull_first) out.read = flat(store.grant_pull(0, 0).tensors);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, 0)))));
  out.now = values_of(store);
  out.g = gradient(0, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, out.g))));
  out.after = values_of(store);
  return out;
}

BOOST_AUTO_TEST_CASE(compensation_linear_corrects_by_the_drift) {
  const double lambda = 1.0, lr = 0.1;
  const auto spec = spec_of(2, sgd(), {}, {dc_kind::linear, float(lambda)});
  bucket_store store{spec};
  const auto p = push_after_a_peer(store, spec, true);
  std::vector<double> expected(p.now.size()), plain(p.now.size());
  for (size_t i = 0; i < p.g.size(); ++i) {
    expected[i] = p.now[i] - lr * (p.g[i] + lambda * (p.now[i] - p.read[i]));
    plain[i] = p.now[i] - lr * p.g[i];
  }
  check_values(p.after, expected);
  BOOST_TEST(differs(expected, plain));  // the correction is large enough to see
}

BOOST_AUTO_TEST_CASE(compensation_dcasgd_corrects_by_g_squared_times_the_drift) {
  const double lambda = 2.0, lr = 0.1;
  const auto spec = spec_of(2, sgd(), {}, {dc_kind::dcasgd, float(lambda)});
  bucket_store store{spec};
  const auto p = push_after_a_peer(store, spec, true);
  std::vector<double> expected(p.now.size()), plain(p.now.size());
  for (size_t i = 0; i < p.g.size(); ++i) {
    const double g = p.g[i];
    expected[i] = p.now[i] - lr * (g + lambda * g * g * (p.now[i] - p.read[i]));
    plain[i] = p.now[i] - lr * g;
  }
  check_values(p.after, expected);
  BOOST_TEST(differs(expected, plain));
}

BOOST_AUTO_TEST_CASE(compensation_adaptive_scales_lambda_by_the_mean_square) {
  const double lambda0 = 0.5, lr = 0.1;
  const auto spec = spec_of(2, sgd(), {}, {dc_kind::dcasgd_adaptive, float(lambda0)});
  bucket_store store{spec};
  const auto p = push_after_a_peer(store, spec, true);
  std::vector<double> expected(p.now.size()), plain(p.now.size());
  for (size_t i = 0; i < p.g.size(); ++i) {
    const double g = p.g[i];
    const double ms = 0.95 * 0.0 + 0.05 * g * g;  // first use: the running mean starts at 0
    const double lambda = lambda0 / std::sqrt(ms + 1e-7);
    expected[i] = p.now[i] - lr * (g + lambda * g * g * (p.now[i] - p.read[i]));
    plain[i] = p.now[i] - lr * g;
  }
  check_values(p.after, expected);
  BOOST_TEST(differs(expected, plain));
}

BOOST_AUTO_TEST_CASE(compensation_needs_a_prior_pull) {
  for (auto kind : {dc_kind::linear, dc_kind::dcasgd, dc_kind::dcasgd_adaptive}) {
    const auto spec = spec_of(2, sgd(), {}, {kind, 0.5f});
    bucket_store store{spec};
    const auto p = push_after_a_peer(store, spec, false);
    std::vector<double> expected(p.now.size());
    for (size_t i = 0; i < p.g.size(); ++i) expected[i] = p.now[i] - 0.1 * p.g[i];
    BOOST_TEST_CONTEXT("compensation kind " << int(kind)) {
      check_values(p.after, expected);
    }
  }
}

BOOST_AUTO_TEST_CASE(compensation_of_a_fresh_read_changes_nothing) {
  const auto spec = spec_of(2, sgd(), {}, {dc_kind::linear, 0.5f});
  bucket_store store{spec};
  const auto before = values_of(store);
  store.grant_pull(0, 0);
  const auto g = gradient(0, 0);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g))));
  std::vector<double> expected(before.size());
  for (size_t i = 0; i < g.size(); ++i) expected[i] = before[i] - 0.1 * g[i];
  check_values(values_of(store), expected);
}

// -- learning rate scaled by staleness ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(lr_staleness_divides_the_step_by_one_plus_staleness) {
  auto opt = sgd();
  opt.lr_staleness = true;
  const auto spec = spec_of(2, opt);
  bucket_store store{spec};
  for (int i = 0; i < 2; ++i) {
    const auto before = values_of(store);
    const auto g = gradient(1, i);
    const auto ack = store.apply(push_of(spec, 1, g, store.snapshot().clock));
    BOOST_TEST_REQUIRE(succeeded(ack));
    BOOST_TEST(ack->staleness == 0u);
    std::vector<double> expected(before.size());
    for (size_t k = 0; k < g.size(); ++k) expected[k] = before[k] - 0.1 * g[k];  // full lr
    check_values(values_of(store), expected);
  }
  const auto before = values_of(store);
  const auto g = gradient(0, 0);
  const auto ack = store.apply(push_of(spec, 0, g, vector_clock(2)));  // read before both
  BOOST_TEST_REQUIRE(succeeded(ack));
  BOOST_TEST(ack->staleness == 2u);
  std::vector<double> expected(before.size());
  for (size_t k = 0; k < g.size(); ++k) expected[k] = before[k] - 0.1 / 3.0 * g[k];
  check_values(values_of(store), expected);
}

BOOST_AUTO_TEST_CASE(without_lr_staleness_a_stale_push_takes_the_full_step) {
  const auto spec = spec_of(2, sgd());
  bucket_store store{spec};
  for (int i = 0; i < 2; ++i)
    BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, i)))));
  const auto before = values_of(store);
  const auto g = gradient(0, 0);
  const auto ack = store.apply(push_of(spec, 0, g, vector_clock(2)));
  BOOST_TEST_REQUIRE(succeeded(ack));
  BOOST_TEST(ack->staleness == 2u);
  std::vector<double> expected(before.size());
  for (size_t k = 0; k < g.size(); ++k) expected[k] = before[k] - 0.1 * g[k];
  check_values(values_of(store), expected);
}

// -- optimizers ---------------------------------------------------------------------------------

// Pushes two steps from worker 0 and returns the values after them, with the gradients used.
std::vector<double> two_steps(const optimizer_config& opt, std::vector<float>& g1,
                              std::vector<float>& g2) {
  const auto spec = spec_of(1, opt);
  bucket_store store{spec};
  g1 = gradient(0, 0);
  g2 = gradient(0, 3);
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g1))));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g2))));
  return values_of(store);
}

std::vector<double> initial_values() {
  return flat(spec_of(1, {}).tensors);
}

BOOST_AUTO_TEST_CASE(optimizer_sgd_is_plain_gradient_descent) {
  auto opt = sgd(0.1f);
  opt.weight_decay = 0.05f;
  std::vector<float> g1, g2;
  const auto actual = two_steps(opt, g1, g2);
  auto theta = initial_values();
  for (const auto* g : {&g1, &g2})
    for (size_t i = 0; i < theta.size(); ++i)
      theta[i] -= double(opt.lr) * ((*g)[i] + double(opt.weight_decay) * theta[i]);
  check_values(actual, theta);
}

BOOST_AUTO_TEST_CASE(optimizer_momentum_is_heavy_ball) {
  optimizer_config opt;
  opt.type = opt_kind::momentum;
  opt.lr = 0.1f;
  opt.beta1 = 0.9f;
  opt.weight_decay = 0.05f;
  std::vector<float> g1, g2;
  const auto actual = two_steps(opt, g1, g2);
  auto theta = initial_values();
  std::vector<double> u(theta.size(), 0.0);
  for (const auto* g : {&g1, &g2}) {
    for (size_t i = 0; i < theta.size(); ++i) {
      u[i] = double(opt.beta1) * u[i] + (*g)[i] + double(opt.weight_decay) * theta[i];
      theta[i] -= double(opt.lr) * u[i];
    }
  }
  check_values(actual, theta);
}

BOOST_AUTO_TEST_CASE(optimizer_nesterov_is_diloco_s_outer_step) {
  optimizer_config opt;
  opt.type = opt_kind::nesterov;
  opt.lr = 0.7f;
  opt.beta1 = 0.9f;
  std::vector<float> g1, g2;
  const auto actual = two_steps(opt, g1, g2);
  auto theta = initial_values();
  std::vector<double> u(theta.size(), 0.0);
  for (const auto* g : {&g1, &g2}) {
    for (size_t i = 0; i < theta.size(); ++i) {
      u[i] = double(opt.beta1) * u[i] + (*g)[i];
      theta[i] -= double(opt.lr) * ((*g)[i] + double(opt.beta1) * u[i]);
    }
  }
  check_values(actual, theta);
}

BOOST_AUTO_TEST_CASE(optimizer_delayed_nesterov_steps_its_momentum_every_delay_updates) {
  optimizer_config opt;
  opt.type = opt_kind::delayed_nesterov;
  opt.lr = 0.7f;
  opt.beta1 = 0.9f;
  opt.delay = 2;
  std::vector<float> g1, g2;
  const auto actual = two_steps(opt, g1, g2);
  // Update 1: g1 at lr / 2, buffered; update 2: g2 at lr / 2 and the momentum on their mean.
  auto theta = initial_values();
  for (size_t i = 0; i < theta.size(); ++i) {
    const double mean = (double(g1[i]) + g2[i]) / 2;
    theta[i] -= double(opt.lr) * (mean + double(opt.beta1) * mean);
  }
  check_values(actual, theta);
}

// Adam in double precision; `l2` adds the decay to the gradient, otherwise it is decoupled.
std::vector<double> adam_reference(const optimizer_config& o, bool l2, const std::vector<float>& g1,
                                   const std::vector<float>& g2) {
  auto theta = initial_values();
  std::vector<double> m(theta.size(), 0.0), v(theta.size(), 0.0);
  const double b1 = o.beta1, b2 = o.beta2, lr = o.lr, eps = o.epsilon, wd = o.weight_decay;
  int t = 0;
  for (const auto* grad : {&g1, &g2}) {
    ++t;
    for (size_t i = 0; i < theta.size(); ++i) {
      const double g = (*grad)[i] + (l2 ? wd * theta[i] : 0.0);
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(b1, t));
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      theta[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + (l2 ? 0.0 : wd * theta[i]));
    }
  }
  return theta;
}

optimizer_config adam_config(opt_kind kind) {
  optimizer_config opt;
  opt.type = kind;
  opt.lr = 0.01f;
  opt.weight_decay = 0.5f;  // large, so that L2 and decoupled decay differ visibly
  return opt;
}

BOOST_AUTO_TEST_CASE(optimizer_adam_adds_weight_decay_to_the_gradient) {
  const auto opt = adam_config(opt_kind::adam);
  std::vector<float> g1, g2;
  const auto actual = two_steps(opt, g1, g2);
  const auto expected = adam_reference(opt, true, g1, g2);
  check_values(actual, expected);
  BOOST_TEST(differs(expected, adam_reference(opt, false, g1, g2)));
}

BOOST_AUTO_TEST_CASE(optimizer_adamw_decouples_weight_decay) {
  const auto opt = adam_config(opt_kind::adamw);
  std::vector<float> g1, g2;
  const auto actual = two_steps(opt, g1, g2);
  check_values(actual, adam_reference(opt, false, g1, g2));
}

// -- staleness histogram ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(histogram_counts_pushes_by_staleness_and_caps_at_64) {
  const auto spec = spec_of(2, sgd(1e-4f));
  bucket_store store{spec};
  for (int i = 0; i < 64; ++i)  // fresh pushes: staleness 0
    BOOST_TEST_REQUIRE(
        succeeded(store.apply(push_of(spec, 1, gradient(1, 0), store.snapshot().clock))));
  const uint64_t stale[] = {64, 65, 63};
  const vector_clock reads[] = {vector_clock(2), vector_clock(2), clock_of({3, 0})};
  for (int i = 0; i < 3; ++i) {
    const auto ack = store.apply(push_of(spec, 0, gradient(0, 0), reads[i]));
    BOOST_TEST_REQUIRE(succeeded(ack));
    BOOST_TEST(ack->staleness == stale[i]);
  }
  const auto stats = store.stats();
  BOOST_TEST_REQUIRE(stats.staleness_histogram.size() == staleness_histogram_size);
  BOOST_TEST(stats.staleness_histogram[0] == 64u);
  BOOST_TEST(stats.staleness_histogram[63] == 1u);
  BOOST_TEST(stats.staleness_histogram[64] == 2u);  // 64 and 65 share the last entry
  uint64_t total = 0;
  for (uint64_t n : stats.staleness_histogram) total += n;
  BOOST_TEST(total == 67u);
  BOOST_TEST(stats.updates_applied == 67u);
  BOOST_TEST(stats.max_staleness == 65u);
  BOOST_TEST(stats.staleness_sum == 64u + 65u + 63u);
}

// -- sign-compressed pushes ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_sign_compressed_push_applies_scale_times_sign) {
  const auto spec = spec_of(1, sgd(0.1f));
  bucket_store store{spec};
  push_request push{spec.bucket, 0, 0, clock_of({0})};
  // Slice "w": signs + - + -, scale 0.5; slice "b": signs - - +, scale 2.
  push.signs.push_back(sign_tensor{"w", {2, 2}, 0, 0.5f, {0b0101}});
  push.signs.push_back(sign_tensor{"b", {3}, 0, 2.0f, {0b100}});
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  const std::vector<double> g = {0.5, -0.5, 0.5, -0.5, -2.0, -2.0, 2.0};
  const auto before = flat(spec.tensors);
  const auto after = values_of(store);
  for (size_t i = 0; i < g.size(); ++i)
    BOOST_TEST(after[i] == before[i] - 0.1 * g[i], boost::test_tools::tolerance(tolerance));
}

BOOST_AUTO_TEST_CASE(a_sign_push_that_does_not_fit_is_rejected_and_changes_nothing) {
  const auto spec = spec_of(1, sgd(0.1f));
  bucket_store store{spec};
  push_request one_missing{spec.bucket, 0, 0, clock_of({0})};
  one_missing.signs.push_back(sign_tensor{"w", {2, 2}, 0, 0.5f, {0b0101}});
  BOOST_TEST(fails_with(store.apply(one_missing), errc::shape_mismatch));
  push_request mixed = push_of(spec, 0, gradient(0, 0));
  mixed.signs.push_back(sign_tensor{"w", {2, 2}, 0, 0.5f, {0b0101}});
  BOOST_TEST(fails_with(store.apply(mixed), errc::shape_mismatch));
  push_request huge{spec.bucket, 0, 0, clock_of({0})};
  huge.signs.push_back(sign_tensor{"w", {2, 2}, 0, 1e30f, {0b0101}});
  huge.signs.push_back(sign_tensor{"b", {3}, 0, 2.0f, {0b100}});
  BOOST_TEST(fails_with(store.apply(huge), errc::non_finite));
  BOOST_TEST(values_of(store) == flat(spec.tensors), boost::test_tools::per_element());
  BOOST_TEST(store.stats().updates_rejected == 3u);
}

// -- workers that join a running job -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_late_worker_starts_at_the_slowest_clock_without_inflating_staleness) {
  const auto spec = spec_of(2, sgd(), consistency_config{mode::ssp, 1});
  bucket_store store{spec};
  for (int step = 0; step < 3; ++step) {
    const vector_clock read = store.grant_pull(0, step).clock;
    BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, step), read))));
    const vector_clock read1 = store.grant_pull(1, step).clock;
    BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, step), read1))));
  }
  const uint64_t start = store.admit(2);
  BOOST_TEST(start == 3u);  // both workers have pushed three times
  BOOST_TEST(store.workers() == 3u);
  BOOST_TEST(store.admit(2) == 3u);  // asking again changes nothing
  // The newcomer neither holds the others back (its clock is 3, not 0) nor may run ahead.
  BOOST_TEST(store.pull_allowed(0, 4));
  BOOST_TEST(!store.pull_allowed(2, 5));
  // Its first push, read after the admission, is fresh.
  const vector_clock read = store.grant_pull(2, start).clock;
  auto ack = store.apply(push_of(spec, 2, gradient(2, 0), read));
  BOOST_TEST_REQUIRE(succeeded(ack));
  BOOST_TEST(ack->staleness == 0u);
  BOOST_TEST(store.stats().max_staleness <= 1u);
}

// -- selective sync -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(selective_sync_sends_only_rows_that_moved_more_than_the_threshold) {
  auto spec = spec_of(1, sgd(1.0f));
  spec.sync_threshold = 0.05f;
  bucket_store store{spec};
  const auto first = store.grant_pull(0, 0);
  BOOST_TEST(first.tensors.size() == 2u);  // the first pull sends everything
  // Move row 1 of "w" (values 2, 3) by 0.5 and every value of "b" by 0.01 (below 0.05).
  std::vector<float> g(7, 0.0f);
  g[2] = -0.5f;
  g[3] = -0.5f;
  g[4] = g[5] = g[6] = 0.01f;
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g, first.clock))));
  const auto second = store.grant_pull(0, 1);
  BOOST_TEST_REQUIRE(second.tensors.size() == 1u);
  const auto& row = second.tensors[0];
  BOOST_TEST(row.name == "w");
  BOOST_TEST(row.row_offset == 1u);
  BOOST_TEST((row.shape == std::vector<uint32_t>{1, 2}));
  BOOST_TEST(row.values[0] == 2.5f, boost::test_tools::tolerance(1e-6f));
  // Nothing moved since: nothing is sent; small moves add up until they cross the threshold.
  BOOST_TEST(store.grant_pull(0, 1).tensors.empty());
  for (int i = 0; i < 5; ++i) BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, g))));
  const auto later = store.grant_pull(0, 6);
  BOOST_TEST_REQUIRE(later.tensors.size() == 2u);  // "w" row 1 again, and now "b"
  BOOST_TEST(later.tensors[1].name == "b");
  // Observers always get everything.
  BOOST_TEST(store.grant_pull(observer_worker, 0).tensors.size() == 2u);
}

// -- steps that apply nothing keep the clocks in step -------------------------------------------

BOOST_AUTO_TEST_CASE(a_refused_push_still_counts_the_step_under_bsp) {
  const auto spec = spec_of(2, sgd(0.1f), consistency_config{mode::bsp, 0});
  bucket_store store{spec};
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, 0)))));
  auto poisoned = gradient(1, 0);
  poisoned[3] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(fails_with(store.apply(push_of(spec, 1, poisoned)), errc::non_finite));
  // The round completed with worker 0's gradient alone, and both may read round 1.
  BOOST_TEST(store.stats().version == 1u);
  BOOST_TEST(store.pull_allowed(0, 1));
  BOOST_TEST(store.pull_allowed(1, 1));
  BOOST_TEST(store.stats().updates_rejected == 1u);
}

BOOST_AUTO_TEST_CASE(a_skipped_push_counts_the_step_and_changes_nothing) {
  const auto spec = spec_of(2, sgd(0.1f), consistency_config{mode::ssp, 0});
  bucket_store store{spec};
  push_request skip{spec.bucket, 1, 0, clock_of({0, 0})};
  skip.skipped = true;
  BOOST_TEST_REQUIRE(succeeded(store.apply(skip)));
  BOOST_TEST(values_of(store) == flat(spec.tensors), boost::test_tools::per_element());
  BOOST_TEST(store.stats().updates_applied == 0u);
  // Worker 1 is at clock 1 now; worker 0 (clock 0) holds it back at bound 0 until it pushes.
  BOOST_TEST(!store.pull_allowed(1, 2));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, 0)))));
  BOOST_TEST(store.pull_allowed(1, 1));
}

// -- resends and saved state --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_resent_push_is_acknowledged_but_not_applied_twice) {
  const auto spec = spec_of(2, sgd());
  bucket_store store{spec};
  auto push = push_of(spec, 0, gradient(0, 0));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  const auto once = values_of(store);
  push.resend = true;
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  BOOST_TEST(values_of(store) == once, boost::test_tools::per_element());
  BOOST_TEST(store.stats().updates_applied == 1u);
  // A resend the bucket never got is applied like any push.
  auto missed = push_of(spec, 0, gradient(0, 1));
  missed.resend = true;
  BOOST_TEST_REQUIRE(succeeded(store.apply(missed)));
  BOOST_TEST(store.stats().updates_applied == 2u);
}

BOOST_AUTO_TEST_CASE(a_resent_push_in_a_bsp_round_is_not_counted_twice) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  auto push = push_of(spec, 0, gradient(0, 0));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  push.resend = true;
  BOOST_TEST(succeeded(store.apply(push)));
  BOOST_TEST(store.stats().updates_rejected == 0u);
}

// -- each batch at most once, whichever worker pushes it -----------------------------------------

// `push` stamped with the batches it was computed from.
push_request of_batches(push_request push, batch_range batches) {
  push.batches = batches;
  return push;
}

// Whether `store` took worker `w`'s gradient of step `step`, computed from `batches`.
bool push_batches(bucket_store& store, const bucket_spec& spec, uint32_t w, int step,
                  batch_range batches) {
  return succeeded(store.apply(of_batches(push_of(spec, w, gradient(w, step)), batches)));
}

BOOST_AUTO_TEST_CASE(a_batch_pushed_again_by_another_worker_is_acknowledged_not_applied) {
  const auto spec = spec_of(3, sgd(), consistency_config{mode::ssp, 0});
  bucket_store store{spec};
  BOOST_TEST_REQUIRE(push_batches(store, spec, 0, 0, {0, 8, 1}));
  const auto once = values_of(store);
  // Worker 0 died before it reported batch 8 done; worker 1 computed it again.
  BOOST_TEST_REQUIRE(push_batches(store, spec, 1, 0, {0, 8, 1}));
  BOOST_TEST(values_of(store) == once, boost::test_tools::per_element());
  const auto stats = store.stats();
  BOOST_TEST(stats.updates_applied == 1u);
  BOOST_TEST(stats.duplicate_pushes == 1u);
  BOOST_TEST(stats.updates_skipped == 0u);
  BOOST_TEST(stats.clock.sum() == 1u);  // the clock counts real updates only
  // Worker 1's clock moved as for a skipped step: at ssp bound 0 worker 2 holds it back.
  BOOST_TEST(!store.pull_allowed(1, 2));
  BOOST_TEST_REQUIRE(push_batches(store, spec, 2, 0, {0, 9, 1}));
  BOOST_TEST(store.pull_allowed(1, 1));
  // Another batch of the same epoch, and the same batch of the next epoch, are applied.
  BOOST_TEST_REQUIRE(push_batches(store, spec, 1, 1, {1, 8, 1}));
  BOOST_TEST(store.stats().updates_applied == 3u);
}

BOOST_AUTO_TEST_CASE(a_resend_the_bucket_recognises_is_not_counted_as_a_duplicate) {
  const auto spec = spec_of(2, sgd());
  bucket_store store{spec};
  auto push = of_batches(push_of(spec, 0, gradient(0, 0)), {0, 0, 1});
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  push.resend = true;
  BOOST_TEST_REQUIRE(succeeded(store.apply(push)));
  BOOST_TEST(store.stats().duplicate_pushes == 0u);
  BOOST_TEST(store.stats().updates_applied == 1u);
}

BOOST_AUTO_TEST_CASE(a_duplicate_counts_as_pushed_in_a_bsp_round) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store store{spec};
  BOOST_TEST_REQUIRE(push_batches(store, spec, 0, 0, {0, 0, 1}));
  BOOST_TEST_REQUIRE(push_batches(store, spec, 1, 0, {0, 1, 1}));
  BOOST_TEST(store.stats().version == 1u);
  // Round 2: worker 0 pushes batch 2; worker 1 pushes batch 1 again (a lost worker's chunk):
  // the round closes on worker 0's gradient alone, and nobody waits.
  const auto before = values_of(store);
  BOOST_TEST_REQUIRE(push_batches(store, spec, 0, 1, {0, 2, 1}));
  BOOST_TEST_REQUIRE(push_batches(store, spec, 1, 1, {0, 1, 1}));
  BOOST_TEST(store.stats().version == 2u);
  BOOST_TEST(store.stats().duplicate_pushes == 1u);
  BOOST_TEST(differs(values_of(store), before));
  BOOST_TEST(store.pull_allowed(0, 2));
  BOOST_TEST(store.pull_allowed(1, 2));
}

BOOST_AUTO_TEST_CASE(with_accumulate_a_chunk_of_batches_is_the_unit) {
  const auto spec = spec_of(2, sgd());
  bucket_store store{spec};
  BOOST_TEST_REQUIRE(push_batches(store, spec, 0, 0, {0, 4, 4}));
  BOOST_TEST_REQUIRE(push_batches(store, spec, 1, 0, {0, 4, 4}));
  BOOST_TEST_REQUIRE(push_batches(store, spec, 1, 1, {0, 8, 4}));
  BOOST_TEST(store.stats().updates_applied == 2u);
  BOOST_TEST(store.stats().duplicate_pushes == 1u);
}

BOOST_AUTO_TEST_CASE(a_restored_bucket_keeps_the_batches_it_counted) {
  const auto spec = spec_of(2, sgd());
  bucket_store original{spec};
  BOOST_TEST_REQUIRE(push_batches(original, spec, 0, 0, {2, 5, 1}));
  BOOST_TEST_REQUIRE(push_batches(original, spec, 1, 0, {2, 5, 1}));
  auto restored = bucket_store::restore(original.save());
  BOOST_TEST_REQUIRE(static_cast<bool>(restored));
  BOOST_TEST(restored->stats().duplicate_pushes == 1u);
  BOOST_TEST(restored->batch_record_bytes() == 16u);
  const auto values = values_of(*restored);
  BOOST_TEST_REQUIRE(push_batches(*restored, spec, 1, 1, {2, 5, 1}));
  BOOST_TEST(values_of(*restored) == values, boost::test_tools::per_element());
  BOOST_TEST(restored->stats().duplicate_pushes == 2u);
}

BOOST_AUTO_TEST_CASE(a_push_without_batches_is_applied_as_before) {
  const auto spec = spec_of(2, sgd());
  bucket_store store{spec};
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 0, gradient(0, 0)))));
  BOOST_TEST_REQUIRE(succeeded(store.apply(push_of(spec, 1, gradient(1, 0)))));
  BOOST_TEST(store.stats().updates_applied == 2u);
  BOOST_TEST(store.batch_record_bytes() == 0u);
}

// Restores save()'s messages and checks that the copy behaves exactly like the original.
void check_restored_copy_matches(const bucket_spec& spec) {
  bucket_store original{spec};
  for (int step = 0; step < 3; ++step)
    for (uint32_t w = 0; w < 2; ++w) {
      original.grant_pull(w, static_cast<uint64_t>(step));
      BOOST_TEST_REQUIRE(succeeded(original.apply(push_of(spec, w, gradient(w, step)))));
    }
  original.grant_pull(0, 3);
  auto restored = bucket_store::restore(original.save());
  BOOST_TEST_REQUIRE(static_cast<bool>(restored), (restored ? "" : describe(restored.error())));
  BOOST_TEST(values_of(*restored) == values_of(original), boost::test_tools::per_element());
  BOOST_TEST(restored->stats().updates_applied == original.stats().updates_applied);
  BOOST_TEST(restored->stats().staleness_histogram == original.stats().staleness_histogram,
             boost::test_tools::per_element());
  // The same next pushes give the same values: moments, compensation memory and clocks came
  // across too.
  for (uint32_t w = 0; w < 2; ++w) {
    const auto push = push_of(spec, w, gradient(w, 7), vector_clock{std::vector<uint64_t>{2, 2}});
    BOOST_TEST_REQUIRE(succeeded(original.apply(push)));
    BOOST_TEST_REQUIRE(succeeded(restored->apply(push)));
  }
  BOOST_TEST(values_of(*restored) == values_of(original), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(save_and_restore_keep_adam_and_compensation_state) {
  optimizer_config adam;
  adam.lr = 0.01f;
  check_restored_copy_matches(spec_of(2, adam, {}, {dc_kind::dcasgd_adaptive, 0.5f}));
}

BOOST_AUTO_TEST_CASE(save_and_restore_keep_the_outer_optimizers_momentum_and_buffer) {
  for (auto kind : {opt_kind::nesterov, opt_kind::delayed_nesterov}) {
    optimizer_config outer;
    outer.type = kind;
    outer.lr = 0.7f;
    outer.delay = 3;  // three updates from the copy's point: one lands in the buffer
    check_restored_copy_matches(spec_of(2, outer, {}, {}));
  }
}

BOOST_AUTO_TEST_CASE(save_and_restore_keep_a_half_done_bsp_round) {
  optimizer_config momentum = sgd();
  momentum.type = opt_kind::momentum;
  const auto spec = spec_of(2, momentum, {mode::bsp, 0});
  bucket_store original{spec};
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_of(spec, 0, gradient(0, 0)))));
  auto restored = bucket_store::restore(original.save());
  BOOST_TEST_REQUIRE(static_cast<bool>(restored));
  const auto push = push_of(spec, 1, gradient(1, 0));
  BOOST_TEST_REQUIRE(succeeded(original.apply(push)));
  BOOST_TEST_REQUIRE(succeeded(restored->apply(push)));
  BOOST_TEST(values_of(*restored) == values_of(original), boost::test_tools::per_element());
  BOOST_TEST(original.stats().version == 1u);
}

BOOST_AUTO_TEST_CASE(restore_refuses_parts_that_do_not_fit) {
  const auto spec = spec_of(2, optimizer_config{});
  bucket_store original{spec};
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_of(spec, 0, gradient(0, 0)))));
  auto saved = original.save();
  BOOST_TEST_REQUIRE(saved.size() >= 3u);
  // The moments of a bucket with other slices do not fit this one.
  auto other = spec;
  other.tensors.pop_back();
  saved[0] = encode(other);
  BOOST_TEST(fails_with(bucket_store::restore(saved), errc::shape_mismatch));
  BOOST_TEST(fails_with(bucket_store::restore({}), errc::malformed_message));
  saved = original.save();
  saved[1].bytes.resize(saved[1].bytes.size() / 2);
  BOOST_TEST(!bucket_store::restore(saved));
}

// One slice of 5 Mi values (20 MiB: over the codec's 16 MiB) and a small one, with Adam.
bucket_spec large_spec() {
  optimizer_config adam;
  adam.lr = 0.01f;
  bucket_spec spec{3, 1, adam, {}, {}, {}};
  const uint32_t n = 5u << 20;
  std::vector<float> values(n);
  for (uint32_t i = 0; i < n; ++i) values[i] = float(i % 1000) * 1e-3f;
  spec.tensors.push_back(dense_tensor{"big", {n}, 0, std::move(values)});
  spec.tensors.push_back(dense_tensor{"b", {3}, 0, {0.1f, -0.2f, 0.3f}});
  return spec;
}

BOOST_AUTO_TEST_CASE(a_bucket_larger_than_a_message_saves_in_parts_under_the_caps) {
  const auto spec = large_spec();
  const size_t total = spec.tensors[0].values.size() + 3;
  bucket_store original{spec};
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_of(spec, 0, std::vector<float>(total, 0.5f)))));
  const auto saved = original.save();
  for (const auto& w : saved) BOOST_TEST(w.bytes.size() <= codec_limits{}.max_bytes);
  auto restored = bucket_store::restore(saved);
  BOOST_TEST_REQUIRE(static_cast<bool>(restored), (restored ? "" : describe(restored.error())));
  BOOST_TEST(values_of(*restored) == values_of(original));
  // The moments came across: the next push moves both the same way.
  const auto next = push_of(spec, 0, std::vector<float>(total, -0.25f));
  BOOST_TEST_REQUIRE(succeeded(original.apply(next)));
  BOOST_TEST_REQUIRE(succeeded(restored->apply(next)));
  BOOST_TEST(values_of(*restored) == values_of(original));
}

BOOST_AUTO_TEST_CASE(a_bucket_streams_its_parts_and_a_restorer_takes_its_arrays_apart) {
  const auto spec = large_spec();
  const size_t total = spec.tensors[0].values.size() + 3;
  bucket_store original{spec};
  BOOST_TEST_REQUIRE(succeeded(original.apply(push_of(spec, 0, std::vector<float>(total, 0.5f)))));
  // save_each hands over save()'s messages one by one, and stops at the first error.
  std::vector<wire> streamed;
  BOOST_TEST(!original.save_each([&](wire w) {
    streamed.push_back(std::move(w));
    return caf::error{};
  }));
  const auto saved = original.save();
  BOOST_TEST_REQUIRE(streamed.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) BOOST_TEST(streamed[i].bytes == saved[i].bytes);
  size_t handed = 0;
  const auto stopped = original.save_each([&](wire) {
    return ++handed == 2 ? make_error(errc::io_failure, "disk full") : caf::error{};
  });
  BOOST_TEST(has_code(stopped, errc::io_failure));
  BOOST_TEST(handed == 2u);
  // With the arrays apart: the messages carry none of the values, which the caller moves.
  std::vector<wire> small;
  BOOST_TEST(!original.save_each(
      [&](wire w) {
        small.push_back(std::move(w));
        return caf::error{};
      },
      true));
  BOOST_TEST(small.size() == 2u);  // the spec and the counters
  auto restorer = bucket_restorer::begin(small[0], {}, true);
  BOOST_TEST_REQUIRE(static_cast<bool>(restorer));
  for (size_t i = 1; i < small.size(); ++i) BOOST_TEST(!restorer->add(small[i]));
  auto into = restorer->arrays();
  const auto from = original.arrays();
  BOOST_TEST_REQUIRE(into.size() == from.size());
  BOOST_TEST(from.size() == 3 * spec.tensors.size());  // values and Adam's two moments
  for (size_t i = 0; i < from.size(); ++i) {
    BOOST_TEST_REQUIRE(into[i].size() == from[i].size());
    std::copy(from[i].begin(), from[i].end(), into[i].begin());
  }
  auto restored = restorer->finish();
  BOOST_TEST_REQUIRE(static_cast<bool>(restored));
  BOOST_TEST(values_of(*restored) == values_of(original));
  const auto next = push_of(spec, 0, std::vector<float>(total, -0.25f));
  BOOST_TEST_REQUIRE(succeeded(original.apply(next)));
  BOOST_TEST_REQUIRE(succeeded(restored->apply(next)));
  BOOST_TEST(values_of(*restored) == values_of(original));
  // Without arrays apart, a restorer given only those messages finds the values missing.
  auto whole = bucket_restorer::begin(small[0]);
  BOOST_TEST_REQUIRE(static_cast<bool>(whole));
  BOOST_TEST(!whole->add(small[1]));
  BOOST_TEST(fails_with(whole->finish(), errc::corrupt_data));
}

BOOST_AUTO_TEST_CASE(a_saved_bucket_missing_a_part_or_out_of_order_is_refused) {
  bucket_store original{large_spec()};
  const auto saved = original.save();
  BOOST_TEST_REQUIRE(saved.size() >= 5u);  // spec, counters, the values in 3 parts, moments
  auto missing = saved;
  missing.erase(missing.begin() + 4);  // the values' last part: the slices end short
  BOOST_TEST(fails_with(bucket_store::restore(missing), errc::corrupt_data));
  missing = saved;
  missing.erase(missing.begin() + 3);  // a middle part: the next one does not follow on
  BOOST_TEST(fails_with(bucket_store::restore(missing), errc::shape_mismatch));
  auto swapped = saved;
  std::swap(swapped[2], swapped[3]);
  BOOST_TEST(fails_with(bucket_store::restore(swapped), errc::shape_mismatch));
  auto spec_alone = std::vector<wire>{saved[0], saved[1]};  // no values at all
  BOOST_TEST(fails_with(bucket_store::restore(spec_alone), errc::corrupt_data));
}

BOOST_AUTO_TEST_CASE(a_saved_spec_may_not_declare_more_values_than_the_cap) {
  bucket_spec spec{3, 1, sgd(), {}, {}, {}};
  spec.values_follow = true;
  spec.tensors.push_back(dense_tensor{"huge", {1u << 20, 1u << 13}, 0, {}});  // 2^33 values
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(spec)), errc::message_too_large));
  spec.tensors[0].shape = {1u << 20, 1u << 10};  // 2^30: allowed, only a shape
  auto decoded = decode<bucket_spec>(encode(spec));
  BOOST_TEST_REQUIRE(static_cast<bool>(decoded));
  BOOST_TEST(decoded->tensors[0].values.empty());
}

BOOST_AUTO_TEST_CASE(a_resumed_bsp_worker_goes_on_after_its_push_in_the_open_round) {
  const auto spec = spec_of(2, sgd(), {mode::bsp, 0});
  bucket_store original{spec};
  auto first = push_of(spec, 0, gradient(0, 0));
  first.worker_clock = 0;
  BOOST_TEST_REQUIRE(succeeded(original.apply(first)));  // worker 1 has not pushed yet
  auto restored = bucket_store::restore(original.save());
  BOOST_TEST_REQUIRE(static_cast<bool>(restored));
  BOOST_TEST(restored->rejoin(0) == 1u);  // its round-0 push is in; it goes on with round 1
  BOOST_TEST(restored->rejoin(1) == 0u);
  auto late = push_of(spec, 1, gradient(1, 0));
  late.worker_clock = 0;
  BOOST_TEST_REQUIRE(succeeded(restored->apply(late)));  // completes round 0
  BOOST_TEST(restored->stats().version == 1u);
  BOOST_TEST(restored->pull_allowed(0, 1));
}
