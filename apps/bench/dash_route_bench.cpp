// The rows of troupe-bench dash-gpu about a bucket's route (--dash-device gpu): one bucket
// step of an n x n DASH slice (B = 256) through the GPU (apply, pack, dash_device: upload,
// group steps, download; unpack), beside the same bucket step on this machine's CPU. The
// route's limit is the kernel's own group-step time (the other rows); the difference is what
// moving the state over PCIe each step costs. Ten steps per repetition, so f = 10 counts one
// root step in ten. Built with CUDA only.
#include <fmt/format.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/dash_device.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

namespace troupe::bench {

namespace {

bucket_spec slice_spec(uint32_t n, uint32_t frequency) {
  bucket_spec spec{0, 1, optimizer_config{}, {}, {}, {}};
  spec.optimizer.type = optimizer_config::kind::dash;
  spec.optimizer.dash_block = 256;
  spec.optimizer.dash_freq = frequency;
  spec.tensors = {dense_tensor{"w", {n, n}, 0, random_values(size_t{n} * n, 3)}};
  return spec;
}

// Eight gradients in turn, as in the CPU suite.
struct pushes {
  std::vector<std::vector<float>> grads;
  uint64_t clock = 0;
  explicit pushes(uint32_t n) {
    for (uint64_t k = 0; k < 8; ++k) grads.push_back(random_values(size_t{n} * n, 10 + k, 0.1f));
  }
  push_request next(uint32_t n) {
    push_request push{0, 0, clock, vector_clock{std::vector<uint64_t>{clock}}};
    push.dense.push_back(dense_tensor{"w", {n, n}, 0, grads[clock % grads.size()]});
    ++clock;
    return push;
  }
};

}  // namespace

std::vector<row> time_bucket_route(uint32_t n, int reps) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg, launch_options{});
  caf::actor_system sys{cfg};
  auto device = spawn_dash_device(sys, dash_device_config{});
  if (!device) {
    fmt::print(stderr, "troupe-bench dash-gpu: no DASH device: {}\n", describe(device.error()));
    return {};
  }
  caf::scoped_actor self{sys};
  std::vector<row> rows;
  bool failed = false;
  for (uint32_t frequency : {1u, 10u}) {
    const auto spec = slice_spec(n, frequency);
    bucket_store gpu{spec}, cpu{spec};
    gpu.defer_dash(true);
    pushes to_gpu{n}, to_cpu{n};
    // The host's share of the route: packing and writing back (mean per step).
    double host_s = 0;
    int host_steps = 0;
    auto since = [](auto began) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    };
    auto gpu_step = [&] {
      if (!gpu.apply(to_gpu.next(n))) failed = true;
      while (gpu.dash_pending() && !failed) {
        const auto packing = std::chrono::steady_clock::now();
        auto job = std::make_shared<kernels::packed_dash_step>(gpu.pack_deferred_dash());
        host_s += since(packing);
        self->request(*device, std::chrono::seconds(60), run_atom_v, std::move(job))
            .receive(
                [&](const dash_job& done) {
                  const auto writing = std::chrono::steady_clock::now();
                  failed = !!gpu.complete_deferred_dash(*done);
                  host_s += since(writing);
                },
                [&](caf::error&) { failed = true; });
        ++host_steps;
      }
    };
    auto cpu_step = [&] {
      if (!cpu.apply(to_cpu.next(n))) failed = true;
    };
    const timing on_gpu = measure(1, reps, [&] {
      for (int s = 0; s < 10; ++s) gpu_step();
    });
    const timing on_cpu = measure(1, std::max(1, reps / 3), [&] {
      for (int s = 0; s < 10; ++s) cpu_step();
    });
    auto per_step = [](timing t) { return timing{t.median_s / 10, t.min_s / 10, t.max_s / 10}; };
    const auto g = per_step(on_gpu), c = per_step(on_cpu);
    rows.push_back(row{fmt::format("bucket route GPU {}^2 B=256 f={}", n, frequency), "ms/step",
                       1e3 * g.median_s, 1e3 * g.min_s, 1e3 * g.max_s});
    rows.push_back(row{fmt::format("bucket on CPU {}^2 B=256 f={}", n, frequency), "ms/step",
                       1e3 * c.median_s, 1e3 * c.min_s, 1e3 * c.max_s});
    const double host_ms = 1e3 * host_s / std::max(host_steps, 1);
    rows.push_back(row{fmt::format("  of the route: host pack+unpack f={}", frequency), "ms/step",
                       host_ms, host_ms, host_ms});
  }
  self->send_exit(*device, caf::exit_reason::user_shutdown);
  if (failed) {
    fmt::print(stderr, "troupe-bench dash-gpu: a bucket step failed on the GPU route\n");
    return {};
  }
  return rows;
}

}  // namespace troupe::bench
