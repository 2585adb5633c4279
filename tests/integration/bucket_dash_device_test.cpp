// Bucket DASH with a device (--dash-device gpu), everything that runs without a GPU: the store
// defers steps and steps them later exactly as it would have at once; a packed step carries
// the parameter, moments and DASH state in the documented layout and unpacks to the same
// state; a package with non-finite values is refused with nothing written; settings the GPU
// cannot step are not deferred; deferring again first steps what is left. And a real bucket
// actor whose device fails, or answers with poisoned values, steps on the CPU, ends exactly
// where a bucket without a device does, and leaves the device alone for the next pushes; one
// whose device steps each package on the CPU from the package alone ends exactly there too.
// (The GPU itself: tests/gpu/dash_device_test.cpp.)
#define BOOST_TEST_MODULE bucket_dash_device
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/kernel_errors.hpp"
#include "actors/bucket/parameter_bucket.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "tests/unit/dash_bucket_support.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using troupe::testing::is_error;
using troupe::testing::push_at;

namespace {

// A 5 x 7 matrix in 4 x 4 blocks (four groups: full, narrow, short, corner) and a vector.
bucket_spec dash_spec(root_solver solver = root_solver::coupled_newton) {
  return testing::dash_bucket_spec(5, 7, 4, 5, solver);
}

uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE(deferred_steps_run_later_exactly_as_at_once) {
  const auto spec = dash_spec();
  bucket_store direct{spec}, deferred{spec};
  BOOST_TEST(deferred.defer_dash(true));
  for (uint64_t t = 0; t < 5; ++t) {
    BOOST_TEST_REQUIRE(testing::succeeded(direct.apply(push_at(spec, t, 10 + t))));
    BOOST_TEST_REQUIRE(testing::succeeded(deferred.apply(push_at(spec, t, 10 + t))));
    BOOST_TEST_REQUIRE(deferred.dash_pending());  // the matrix waits; the vector took AdamW
    BOOST_TEST(deferred.slices()[1].values == direct.slices()[1].values,
               boost::test_tools::per_element());
    deferred.run_deferred_dash();
    BOOST_TEST(!deferred.dash_pending());
    BOOST_TEST(deferred.slices()[0].values == direct.slices()[0].values,
               boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(a_package_holds_the_documented_layout_and_unpacks_to_the_same_state) {
  const auto spec = dash_spec();
  bucket_store store{spec};
  store.defer_dash(true);
  for (uint64_t t = 0; t < 3; ++t) {
    BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, t, 20 + t))));
    store.run_deferred_dash();
  }
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, 3, 30))));
  const auto before = store.save();
  auto package = store.pack_deferred_dash();
  const auto& values = *package.values;
  BOOST_TEST(package.hyper.step == 4u);
  BOOST_TEST(!package.hyper.compute_roots);  // every 2nd step, from the 1st
  BOOST_TEST(package.groups.size() == 4u);
  const auto& w = store.slices()[0].values;
  for (size_t i = 0; i < w.size(); ++i) BOOST_TEST(values[package.theta + i] == w[i]);
  // The corner group: one 1 x 3 block at (4, 4); its first moment stacked row by row.
  const auto& corner = package.groups[3];
  BOOST_TEST(corner.rows == 1u);
  BOOST_TEST(corner.cols == 3u);
  BOOST_TEST(bits_of(values[corner.row0]) == 4u);
  BOOST_TEST(bits_of(values[corner.col0]) == 4u);
  BOOST_TEST(bits_of(values[corner.resets]) == 0u);
  // Writing the unstepped package back changes nothing, and retires the step.
  BOOST_TEST(!store.complete_deferred_dash(package));
  BOOST_TEST(!store.dash_pending());
  const auto after = store.save();
  BOOST_TEST_REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) BOOST_TEST(after[i].bytes == before[i].bytes);
}

BOOST_AUTO_TEST_CASE(a_poisoned_or_misshapen_package_writes_nothing) {
  const auto spec = dash_spec();
  bucket_store store{spec}, direct{spec};
  store.defer_dash(true);
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, 0, 40))));
  BOOST_TEST_REQUIRE(testing::succeeded(direct.apply(push_at(spec, 0, 40))));
  auto poisoned = store.pack_deferred_dash();
  (*poisoned.values)[poisoned.theta + 3] = NAN;
  BOOST_TEST(is_error(store.complete_deferred_dash(poisoned), errc::non_finite));
  auto short_one = store.pack_deferred_dash();
  short_one.values->pop_back();
  BOOST_TEST(is_error(store.complete_deferred_dash(short_one), errc::shape_mismatch));
  auto moved = store.pack_deferred_dash();  // a layout with its moments somewhere else
  std::swap(moved.groups[0].m, moved.groups[0].v);
  BOOST_TEST(is_error(store.complete_deferred_dash(moved), errc::shape_mismatch));
  auto other_step = store.pack_deferred_dash();
  ++other_step.hyper.step;
  BOOST_TEST(is_error(store.complete_deferred_dash(other_step), errc::malformed_message));
  BOOST_TEST_REQUIRE(store.dash_pending());
  store.run_deferred_dash();
  BOOST_TEST(store.slices()[0].values == direct.slices()[0].values,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_spent_package_is_packed_into_again_as_if_fresh) {
  const auto spec = dash_spec();
  bucket_store store{spec};
  store.defer_dash(true);
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, 0, 43))));
  auto spent = store.pack_deferred_dash();
  const float* reused = spent.values->data();
  (*spent.values)[spent.theta] = NAN;  // refused: the step stays pending, the values are spent
  (*spent.values)[spent.groups[0].resets] = 5.0f;
  BOOST_TEST(is_error(store.complete_deferred_dash(spent), errc::non_finite));
  BOOST_TEST(!spent.values);
  auto again = store.pack_deferred_dash();
  BOOST_TEST(again.values->data() == reused);
  auto fresh = store.pack_deferred_dash();  // `again` still holds the spare: a new array
  BOOST_TEST(fresh.values->data() != reused);
  BOOST_TEST(*again.values == *fresh.values, boost::test_tools::per_element());
  BOOST_TEST(!store.complete_deferred_dash(again));
}

BOOST_AUTO_TEST_CASE(a_gradient_the_device_does_not_write_back_is_not_checked) {
  const auto spec = dash_spec();
  bucket_store store{spec};
  store.defer_dash(true);
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, 0, 45))));
  auto package = store.pack_deferred_dash();
  (*package.values)[package.grad] = NAN;  // the device resets such a block itself
  BOOST_TEST(!store.complete_deferred_dash(package));
}

BOOST_AUTO_TEST_CASE(deferring_again_first_steps_what_a_lost_owner_left) {
  const auto spec = dash_spec();
  bucket_store store{spec}, direct{spec};
  store.defer_dash(true);
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, 0, 47))));
  BOOST_TEST_REQUIRE(testing::succeeded(direct.apply(push_at(spec, 0, 47))));
  BOOST_TEST_REQUIRE(store.dash_pending());
  BOOST_TEST(store.defer_dash(true));  // what a restarted bucket actor does
  BOOST_TEST(!store.dash_pending());
  BOOST_TEST(store.slices()[0].values == direct.slices()[0].values,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(settings_the_gpu_cannot_step_are_not_deferred) {
  const auto spec = dash_spec(root_solver::evd);  // evd roots
  bucket_store store{spec};
  BOOST_TEST(!store.defer_dash(true));
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push_at(spec, 0, 50))));
  BOOST_TEST(!store.dash_pending());
}

namespace {

// Devices that fail the way a GPU can: refusing (a CUDA error) or answering with NaN. Each
// counts the jobs it was given.
dash_device_actor::behavior_type failing_device(dash_device_actor::pointer,
                                                std::shared_ptr<std::atomic<int>> jobs) {
  return {[jobs](run_atom, dash_job) -> caf::result<dash_job> {
    ++*jobs;
    return make_error(errc::device_failure, "cudaErrorLaunchFailure (a test device)");
  }};
}

dash_device_actor::behavior_type poisoning_device(dash_device_actor::pointer,
                                                  std::shared_ptr<std::atomic<int>> jobs) {
  return {[jobs](run_atom, dash_job job) -> caf::result<dash_job> {
    ++*jobs;
    for (auto& x : *job->values) x = NAN;
    return job;
  }};
}

// The settings a device learns from a package alone: the block size from its groups, the
// hyperparameters and whether to compute roots from packed_hyper; coupled Newton with power
// scaling and fp32 statistics, as on the GPU.
kernels::dash_config config_of(const kernels::packed_dash_step& job) {
  kernels::dash_config c;
  c.block = 0;
  for (const auto& g : job.groups) c.block = std::max({c.block, g.rows, g.cols});
  const auto& h = job.hyper;
  c.frequency = h.compute_roots ? 1 : std::numeric_limits<uint32_t>::max();
  c.beta = h.beta;
  c.roots.solver = kernels::root_solver::coupled_newton;
  c.roots.epsilon = h.damping;
  c.adam = kernels::adam_hyper{h.lr, h.beta1, h.beta2, h.epsilon, h.weight_decay, h.step};
  c.nesterov = h.nesterov;
  return c;
}

// A device that steps each package on the CPU from what the package alone carries (a fresh
// dash_matrix, given the package's settings and state): the route's success path where there
// is no GPU, and a check that a package holds everything a step needs (then the result is
// exact; a layout that does not fit the settings is refused by the unpacking).
dash_device_actor::behavior_type cpu_device(dash_device_actor::pointer,
                                            std::shared_ptr<std::atomic<int>> jobs) {
  return {[jobs](run_atom, dash_job job) -> caf::result<dash_job> {
    ++*jobs;
    kernels::dash_matrix dash{job->rows, job->cols, config_of(*job)};
    const size_t n = size_t{job->rows} * job->cols;
    std::vector<float> theta(n), m(n), v(n);
    auto unpacked = kernels::unpack_dash_step(*job, dash, theta, m, v);
    if (!unpacked) return make_error(unpacked.error());
    const auto grad_at = job->values->begin() + static_cast<ptrdiff_t>(job->grad);
    const std::vector<float> grad(grad_at, grad_at + static_cast<ptrdiff_t>(n));
    dash.step(theta, grad, m, v, job->hyper.step, job->hyper.lr);
    return std::make_shared<kernels::packed_dash_step>(
        kernels::pack_dash_step(dash, theta, grad, m, v, job->hyper.step, job->hyper.lr));
  }};
}

// `pushes` pushes into a bucket whose DASH device is `device`; its values after them.
template <class Device, class... Args>
std::vector<float> train_with(const bucket_spec& spec, std::shared_ptr<metrics_registry> metrics,
                              uint64_t pushes, Device device, Args... args) {
  caf::actor_system_config cfg;
  launch_options opts;
  opts.threads = 2;
  configure_actor_system(cfg, opts);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  bucket_actor_config config{self->address(), fixed_link(caf::actor_cast<coordinator_actor>(self)),
                             std::chrono::seconds(30), logger{"bucket", log_level::error}};
  config.metrics = std::move(metrics);
  config.dash_device = sys.spawn(device, args...);
  auto bucket = sys.spawn(parameter_bucket, std::make_shared<bucket_store>(spec), config);
  const auto timeout = std::chrono::seconds(30);
  for (uint64_t t = 0; t < pushes; ++t)
    self->request(bucket, timeout, push_atom_v, encode(push_at(spec, t, 60 + t)))
        .receive([](const wire&) {},
                 [](caf::error& err) { BOOST_FAIL("push refused: " << describe(err)); });
  std::vector<float> values;
  self->request(bucket, timeout, pull_atom_v, encode(pull_request{0, 0, pushes}))
      .receive(
          [&](const wire& w) {
            auto reply = decode<pull_reply>(w);
            BOOST_TEST_REQUIRE(testing::succeeded(reply));
            values = reply->tensors[0].values;
          },
          [](caf::error& err) { BOOST_FAIL("pull refused: " << describe(err)); });
  self->send_exit(bucket, caf::exit_reason::user_shutdown);
  self->send_exit(*config.dash_device, caf::exit_reason::user_shutdown);
  return values;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_failing_device_leaves_the_cpu_to_step_exactly) {
  const auto spec = dash_spec();
  bucket_store direct{spec};
  for (uint64_t t = 0; t < 4; ++t)
    BOOST_TEST_REQUIRE(testing::succeeded(direct.apply(push_at(spec, t, 60 + t))));
  const auto expected = direct.slices()[0].values;
  auto jobs = std::make_shared<std::atomic<int>>(0);
  auto metrics = std::make_shared<metrics_registry>();
  declare_node_metrics(*metrics);
  BOOST_TEST(train_with(spec, metrics, 4, failing_device, jobs) == expected,
             boost::test_tools::per_element());
  BOOST_TEST(*jobs == 1);  // after a failure the next pushes do not wait for the device
  BOOST_TEST(metrics->counter("troupe_dash_device_failures_total", {"0"})->value() == 1.0);
  BOOST_TEST(metrics->counter("troupe_dash_device_steps_total", {"0"})->value() == 0.0);
  *jobs = 0;
  BOOST_TEST(train_with(spec, metrics, 4, poisoning_device, jobs) == expected,
             boost::test_tools::per_element());
  BOOST_TEST(*jobs == 1);
  BOOST_TEST(metrics->counter("troupe_dash_device_failures_total", {"0"})->value() == 2.0);
}

BOOST_AUTO_TEST_CASE(a_device_that_steps_from_the_package_alone_gives_the_same_values) {
  for (dash_storage storage : {dash_storage::fp32, dash_storage::bf16,
                               dash_storage::fp16}) {  // fp32, bf16, fp16 statistics on the host
    BOOST_TEST_CONTEXT("storage " << int(storage)) {
      auto spec = dash_spec();
      spec.optimizer.dash_storage = storage;
      bucket_store direct{spec};
      for (uint64_t t = 0; t < 4; ++t)
        BOOST_TEST_REQUIRE(testing::succeeded(direct.apply(push_at(spec, t, 60 + t))));
      auto jobs = std::make_shared<std::atomic<int>>(0);
      auto metrics = std::make_shared<metrics_registry>();
      declare_node_metrics(*metrics);
      BOOST_TEST(train_with(spec, metrics, 4, cpu_device, jobs) == direct.slices()[0].values,
                 boost::test_tools::per_element());
      BOOST_TEST(*jobs == 4);  // every step went through the device
      BOOST_TEST(metrics->counter("troupe_dash_device_steps_total", {"0"})->value() == 4.0);
      BOOST_TEST(metrics->counter("troupe_dash_device_failures_total", {"0"})->value() == 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(after_100_pushes_on_the_cpu_the_device_gets_another_try) {
  const auto spec = dash_spec();
  bucket_store direct{spec};
  for (uint64_t t = 0; t < 102; ++t)
    BOOST_TEST_REQUIRE(testing::succeeded(direct.apply(push_at(spec, t, 60 + t))));
  auto jobs = std::make_shared<std::atomic<int>>(0);
  auto metrics = std::make_shared<metrics_registry>();
  declare_node_metrics(*metrics);
  BOOST_TEST(train_with(spec, metrics, 102, failing_device, jobs) == direct.slices()[0].values,
             boost::test_tools::per_element());
  BOOST_TEST(*jobs == 2);  // the 1st push, then the 102nd: 100 applied pushes in between
}
