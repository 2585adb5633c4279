// A real parameter bucket in an actor system of the test's own, for the tests that talk to
// one (bucket_actor_test, lane_test): a two-slice spec, pushes for it, and the fixture.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <memory>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/parameter_bucket.hpp"
#include "troupe/node.hpp"

namespace troupe::testing {

inline bucket_spec two_slice_spec(optimizer_config opt, uint32_t workers = 2) {
  bucket_spec spec{7, workers, opt, {}};
  spec.tensors.push_back(dense_tensor{"w", {2, 3}, 4, {0.5f, -1.0f, 2.0f, 0.0f, 0.25f, -0.75f}});
  spec.tensors.push_back(dense_tensor{"b", {3}, 0, {0.1f, 0.2f, 0.3f}});
  return spec;
}

inline push_request push_for(const bucket_spec& spec, uint32_t worker, float scale,
                             vector_clock read = vector_clock{}) {
  push_request push{spec.bucket, worker, 0, std::move(read), {}, {}, {}};
  for (const auto& t : spec.tensors) {
    dense_tensor g = t;
    for (size_t i = 0; i < g.values.size(); ++i) g.values[i] = scale * (0.3f * i - 0.4f);
    push.dense.push_back(std::move(g));
  }
  return push;
}

// An actor system with one real bucket actor of two_slice_spec, asked from a scoped actor;
// the bucket is stopped when the test ends.
struct bucket_actor_fixture {
  static caf::actor_system_config& configured(caf::actor_system_config& cfg) {
    launch_options opts;
    opts.threads = 2;
    configure_actor_system(cfg, opts);
    return cfg;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{configured(cfg)};
  caf::scoped_actor self{sys};
  const bucket_spec spec = two_slice_spec(optimizer_config{});
  const bucket_actor_config config{self->address(),
                                   fixed_link(caf::actor_cast<coordinator_actor>(self)),
                                   std::chrono::seconds(30), logger{"bucket", log_level::error}};
  bucket_actor bucket = sys.spawn(parameter_bucket, std::make_shared<bucket_store>(spec), config);
  ~bucket_actor_fixture() { self->send_exit(bucket, caf::exit_reason::user_shutdown); }
};

}  // namespace troupe::testing
