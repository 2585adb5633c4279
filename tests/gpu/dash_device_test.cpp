// Bucket DASH on a GPU (--dash-device gpu) against the CPU: a packed step sent to the real
// dash_device (gpu_stream, cuBLAS) and written back moves the parameter as the CPU step does,
// and a parameter bucket with the device ends four pushes where a bucket without one does.
// A 300 x 200 matrix in 128 x 128 blocks (four groups). Skipped (not failed) on a machine
// without a usable GPU.
#define BOOST_TEST_MODULE dash_device
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <cmath>
#include <random>

#include "kernels/cuda/device.hpp"

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/dash_device.hpp"
#include "actors/bucket/parameter_bucket.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using troupe::testing::has_gpu;

namespace {

bucket_spec matrix_spec() {
  bucket_spec spec{0, 1, optimizer_config{}, {}, {}, {}};
  spec.optimizer.type = optimizer_config::kind::dash;
  spec.optimizer.lr = 1e-3f;
  spec.optimizer.dash_block = 128;
  spec.optimizer.dash_freq = 2;
  dense_tensor w{"w", {300, 200}, 0, troupe::testing::normal_values(60000, 1, 1.0f)};
  dense_tensor b{"b", {200}, 0, troupe::testing::normal_values(200, 2, 1.0f)};
  spec.tensors = {w, b};
  return spec;
}

push_request push_at(const bucket_spec& spec, uint64_t clock) {
  push_request push{spec.bucket, 0, clock, vector_clock{std::vector<uint64_t>{clock}}};
  uint32_t seed = 10 + static_cast<uint32_t>(clock);
  for (const auto& t : spec.tensors)
    push.dense.push_back(
        dense_tensor{t.name, t.shape, t.row_offset,
                     troupe::testing::normal_values(t.values.size(), seed++, 0.1f)});
  return push;
}

// ||after - before - (expected - before)|| / ||expected - before||: how far the GPU's update
// is from the CPU's.
double update_difference(const std::vector<float>& before, const std::vector<float>& after,
                         const std::vector<float>& expected) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const double gpu = double(after[i]) - before[i], cpu = double(expected[i]) - before[i];
    diff += (gpu - cpu) * (gpu - cpu);
    norm += cpu * cpu;
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

struct actor_system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  actor_system_fixture() {
    launch_options opts;
    opts.threads = 2;
    configure_actor_system(cfg, opts);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_packed_step_on_the_gpu_matches_the_cpu_step, actor_system_fixture,
                        *boost::unit_test::precondition(has_gpu)) {
  caf::scoped_actor self{*sys};
  auto device = spawn_dash_device(*sys, dash_device_config{});
  BOOST_TEST_REQUIRE(testing::succeeded(device));
  for (dash_storage storage :
       {dash_storage::fp32, dash_storage::bf16}) {  // fp32 and bf16 statistics on the host
    auto spec = matrix_spec();
    spec.optimizer.dash_storage = storage;
    bucket_store cpu{spec}, gpu{spec};
    gpu.defer_dash(true);
    cpu.defer_dash(true);
    for (uint64_t t = 0; t < 3; ++t) {
      const auto before = gpu.slices()[0].values;
      BOOST_TEST_REQUIRE(testing::succeeded(cpu.apply(push_at(spec, t))));
      BOOST_TEST_REQUIRE(testing::succeeded(gpu.apply(push_at(spec, t))));
      cpu.run_deferred_dash();
      auto job = std::make_shared<kernels::packed_dash_step>(gpu.pack_deferred_dash());
      self->request(*device, std::chrono::seconds(60), run_atom_v, job)
          .receive([&](const dash_job& done) { BOOST_TEST(!gpu.complete_deferred_dash(*done)); },
                   [](caf::error& err) { BOOST_FAIL("the device refused: " << describe(err)); });
      const double difference =
          update_difference(before, gpu.slices()[0].values, cpu.slices()[0].values);
      BOOST_TEST(difference < 1e-2, "storage " << int(storage) << ", step " << t + 1
                                               << ": update differs by " << difference);
    }
    BOOST_TEST(gpu.dash_resets() == 0u);
  }
  self->send_exit(*device, caf::exit_reason::user_shutdown);
}

BOOST_FIXTURE_TEST_CASE(a_bucket_with_the_device_trains_as_on_the_cpu, actor_system_fixture,
                        *boost::unit_test::precondition(has_gpu)) {
  caf::scoped_actor self{*sys};
  const auto spec = matrix_spec();
  bucket_actor_config config{self->address(), fixed_link(caf::actor_cast<coordinator_actor>(self)),
                             std::chrono::seconds(60), logger{"bucket", log_level::warn}};
  auto device = spawn_dash_device(*sys, dash_device_config{});
  BOOST_TEST_REQUIRE(testing::succeeded(device));
  auto metrics = std::make_shared<metrics_registry>();
  declare_node_metrics(*metrics);
  config.metrics = metrics;
  config.dash_device = *device;
  auto bucket = sys->spawn(parameter_bucket, std::make_shared<bucket_store>(spec), config);
  bucket_store cpu{spec};
  for (uint64_t t = 0; t < 4; ++t) {
    BOOST_TEST_REQUIRE(testing::succeeded(cpu.apply(push_at(spec, t))));
    self->request(bucket, std::chrono::seconds(60), push_atom_v, encode(push_at(spec, t)))
        .receive([](const wire&) {},
                 [](caf::error& err) { BOOST_FAIL("push refused: " << describe(err)); });
  }
  std::vector<float> values;
  self->request(bucket, std::chrono::seconds(60), pull_atom_v, encode(pull_request{0, 0, 4}))
      .receive([&](const wire& w) { values = decode<pull_reply>(w)->tensors[0].values; },
               [](caf::error& err) { BOOST_FAIL("pull refused: " << describe(err)); });
  BOOST_TEST_REQUIRE(values.size() == cpu.slices()[0].values.size());
  for (float x : values) BOOST_TEST_REQUIRE(std::isfinite(x));
  const double difference =
      update_difference(spec.tensors[0].values, values, cpu.slices()[0].values);
  BOOST_TEST(difference < 1e-2, "four steps: the update differs by " << difference);
  // Every step on the GPU, none on the CPU (whose fallback would give the same values).
  BOOST_TEST(metrics->counter("troupe_dash_device_steps_total", {"0"})->value() == 4.0);
  BOOST_TEST(metrics->counter("troupe_dash_device_failures_total", {"0"})->value() == 0.0);
  self->send_exit(bucket, caf::exit_reason::user_shutdown);
  self->send_exit(*config.dash_device, caf::exit_reason::user_shutdown);
  self->send_exit(*device, caf::exit_reason::user_shutdown);
}

// tests/gpu/run.sh sets TROUPE_REQUIRE_GPU=1: there a missing GPU is a failure, not a skip.
BOOST_AUTO_TEST_CASE(a_gpu_is_present_when_required) {
  if (troupe::testing::gpu_required()) BOOST_TEST(troupe::kernels::cuda::device_count() > 0);
}

// Where no GPU is visible (CI), asking for the device is a clear error, not a crash.
BOOST_FIXTURE_TEST_CASE(without_a_gpu_the_device_is_refused, actor_system_fixture) {
  if (troupe::kernels::cuda::device_count() > 0) return;
  auto device = spawn_dash_device(*sys, dash_device_config{});
  BOOST_TEST_REQUIRE(!device);
  BOOST_TEST(testing::is_error(device.error(), errc::device_failure));
}
