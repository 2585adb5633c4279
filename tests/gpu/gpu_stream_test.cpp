// The gpu_stream actor: where no GPU is visible it is not spawned (a clear device_failure, and
// callers run the CPU kernels); on a GPU, buffers are allocated, uploaded, used by a DASH group
// step run through the actor, downloaded, and the result matches the CPU twin; every reply
// comes from the stream's completion, never from a blocked thread.
#define BOOST_TEST_MODULE gpu_stream
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <cmath>
#include <random>

#include "actors/gpu/gpu_stream.hpp"
#include "kernels/cpu/dash.hpp"
#include "kernels/cuda/dash.hpp"
#include "kernels/cuda/device.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using troupe::testing::normal_values;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    register_protocol(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(without_a_gpu_it_is_not_spawned, system_fixture) {
  if (kernels::cuda::device_count() > 0) return;  // the GPU case is the next test
  auto stream = spawn_gpu_stream(*sys, gpu_stream_config{});
  BOOST_TEST_REQUIRE(!stream);
  BOOST_TEST(describe(stream.error()).find("device_failure") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(a_dash_step_runs_through_the_actor, system_fixture) {
  if (kernels::cuda::device_count() == 0) {
    BOOST_TEST_MESSAGE("no usable CUDA device: skipped");
    return;
  }
  auto stream = spawn_gpu_stream(*sys, gpu_stream_config{});
  BOOST_TEST_REQUIRE(static_cast<bool>(stream));
  caf::scoped_actor self{*sys};
  const auto timeout = std::chrono::seconds(30);
  auto alloc = [&](uint64_t floats) {
    uint64_t id = 0;
    self->request(*stream, timeout, alloc_atom_v, floats)
        .receive([&](uint64_t got) { id = got; },
                 [&](caf::error& err) { BOOST_FAIL(describe(err)); });
    return id;
  };
  auto upload = [&](uint64_t id, std::vector<float> values) {
    self->request(*stream, timeout, upload_atom_v, id,
                  host_values{std::make_shared<const std::vector<float>>(std::move(values))})
        .receive([](bool) {}, [&](caf::error& err) { BOOST_FAIL(describe(err)); });
  };
  // One 128 x 96 block: a group of one.
  const uint32_t rows = 128, cols = 96;
  kernels::dash_config config;
  config.block = 128;
  config.frequency = 1;
  kernels::dash_matrix cpu{rows, cols, config};
  auto theta = normal_values(size_t{rows} * cols, 1, 1.0f);
  const auto grad = normal_values(theta.size(), 2, 0.1f);
  const uint64_t d_theta = alloc(theta.size()), d_grad = alloc(grad.size());
  const uint64_t d_origin = alloc(1);  // row0 = col0 = 0 (as uint32 bits of 0.0f)
  const uint64_t d_left = alloc(rows * rows), d_right = alloc(cols * cols);
  const uint64_t d_lroot = alloc(rows * rows), d_rroot = alloc(cols * cols);
  const uint64_t d_m = alloc(theta.size()), d_v = alloc(theta.size());
  const uint64_t d_work = alloc(kernels::cuda::dash_workspace_floats(rows, cols, 1));
  const uint64_t d_resets = alloc(1);
  upload(d_theta, theta);
  upload(d_grad, grad);
  for (uint64_t id : {d_origin, d_left, d_right, d_m, d_v, d_resets})
    upload(id, std::vector<float>(id == d_left             ? rows * rows
                                  : id == d_right          ? cols * cols
                                  : id == d_m || id == d_v ? theta.size()
                                                           : 1,
                                  0.0f));
  gpu_work step = [=](const gpu_context& c) {
    kernels::cuda::dash_group_buffers g{static_cast<int>(rows),
                                        static_cast<int>(cols),
                                        1,
                                        reinterpret_cast<const uint32_t*>(c.buffer(d_origin)),
                                        reinterpret_cast<const uint32_t*>(c.buffer(d_origin)),
                                        c.buffer(d_left),
                                        c.buffer(d_right),
                                        c.buffer(d_lroot),
                                        c.buffer(d_rroot),
                                        c.buffer(d_m),
                                        c.buffer(d_v),
                                        c.buffer(d_work),
                                        reinterpret_cast<int*>(c.buffer(d_resets))};
    if (auto err = kernels::cuda::dash_group_init(g, c.compute)) return err;
    kernels::cuda::dash_step_params p;
    p.compute_roots = true;
    return kernels::cuda::dash_group_step(c.blas, c.compute, c.buffer(d_theta), c.buffer(d_grad),
                                          static_cast<int>(cols), g, p);
  };
  self->request(*stream, timeout, run_atom_v, step)
      .receive([](bool) {}, [&](caf::error& err) { BOOST_FAIL(describe(err)); });
  host_result gpu;
  self->request(*stream, timeout, download_atom_v, d_theta)
      .receive([&](host_result r) { gpu = std::move(r); },
               [&](caf::error& err) { BOOST_FAIL(describe(err)); });
  std::vector<float> m(theta.size()), v(theta.size());
  const auto before = theta;
  cpu.step(theta, grad, m, v, 1, config.adam.lr);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < theta.size(); ++i) {
    const double want = theta[i] - before[i], got = (*gpu)[i] - before[i];
    diff += (got - want) * (got - want);
    norm += want * want;
  }
  BOOST_TEST(std::sqrt(diff / norm) < 1e-2);
  // A released buffer's pages serve the next allocation, which works like any other.
  self->send(*stream, release_atom_v, d_work);
  const uint64_t again = alloc(kernels::cuda::dash_workspace_floats(rows, cols, 1));
  upload(again, std::vector<float>(16, 2.0f));
  self->request(*stream, timeout, download_atom_v, again)
      .receive([&](host_result r) { BOOST_TEST((*r)[15] == 2.0f); },
               [&](caf::error& err) { BOOST_FAIL(describe(err)); });
  // A download into a given vector fills that one, resized to the buffer.
  auto into = std::make_shared<std::vector<float>>(3, -1.0f);
  self->request(*stream, timeout, download_atom_v, again, into)
      .receive(
          [&](host_result r) {
            BOOST_TEST(r.get() == into.get());
            BOOST_TEST(r->size() == kernels::cuda::dash_workspace_floats(rows, cols, 1));
            BOOST_TEST((*r)[0] == 2.0f);
            BOOST_TEST((*r)[15] == 2.0f);
          },
          [&](caf::error& err) { BOOST_FAIL(describe(err)); });
  self->send_exit(caf::actor_cast<caf::actor>(*stream), caf::exit_reason::user_shutdown);
}
