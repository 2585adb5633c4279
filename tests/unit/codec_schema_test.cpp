// Unit tests of wire schema version 2 (messages/types.hpp's wire_schema_version): DASH's
// choices and the collective travel as Cap'n Proto enums, an app's update rule by name,
// version-1 bucket specs (as checkpoints hold them) still decode, and values outside an enum
// are refused. Part of the codec test module (codec_test.cpp).
#include <boost/test/unit_test.hpp>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "expect_error.hpp"
#include "messages/codec.hpp"
#include "messages/codec_detail.hpp"
#include "messages/troupe.capnp.h"

using namespace troupe;
using troupe::detail::to_wire;
using troupe::testing::fails_with;
using troupe::testing::succeeded;

namespace {

group_start some_group_start(collective_kind backend) {
  group_start x;
  x.rank = 1;
  x.size = 2;
  x.epochs = 1;
  x.global_batch = 64;
  x.bucket_bytes = 1 << 20;
  x.timeout_ms = 1000;
  x.hosts = {"a", "b"};
  x.collective = backend;
  return x;
}

// A bucket spec of one slice written by hand, with DASH's choices as version 1 wrote them.
wire version_one_dash_spec(uint8_t solver, uint8_t storage, uint8_t scaling) {
  capnp::MallocMessageBuilder message;
  auto spec = message.initRoot<schema::BucketSpec>();
  spec.setWorkers(1);
  spec.setBucketCount(1);
  auto opt = spec.initOptimizer();
  opt.setKind(schema::Optimizer::Kind::DASH);
  opt.setLr(0.01f);
  opt.setDashBlock(8);
  opt.setDashFreq(2);
  opt.setLegacyDashSolver(solver);
  opt.setLegacyDashStorage(storage);
  opt.setLegacyDashScaling(scaling);
  return to_wire(message);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(schema_version_2)

BOOST_AUTO_TEST_CASE(dash_choices_round_trip_as_enums) {
  for (auto solver : {root_solver::evd, root_solver::coupled_newton, root_solver::newton_db,
                      root_solver::chebyshev})
    for (auto storage : {dash_storage::fp32, dash_storage::bf16, dash_storage::fp16})
      for (auto scaling : {root_scaling::power_iteration, root_scaling::frobenius}) {
        bucket_spec x;
        x.workers = 1;
        x.optimizer.type = optimizer_config::kind::dash;
        x.optimizer.dash_solver = solver;
        x.optimizer.dash_storage = storage;
        x.optimizer.dash_scaling = scaling;
        auto y = decode<bucket_spec>(encode(x));
        BOOST_TEST_REQUIRE(succeeded(y));
        BOOST_TEST((y->optimizer.dash_solver == solver));
        BOOST_TEST((y->optimizer.dash_storage == storage));
        BOOST_TEST((y->optimizer.dash_scaling == scaling));
      }
}

BOOST_AUTO_TEST_CASE(version_one_bytes_still_decode) {
  auto y = decode<bucket_spec>(version_one_dash_spec(3, 2, 1));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST((y->optimizer.dash_solver == root_solver::chebyshev));
  BOOST_TEST((y->optimizer.dash_storage == dash_storage::fp16));
  BOOST_TEST((y->optimizer.dash_scaling == root_scaling::frobenius));
  BOOST_TEST(
      fails_with(decode<bucket_spec>(version_one_dash_spec(4, 0, 0)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(values_outside_an_enum_are_malformed) {
  capnp::MallocMessageBuilder message;
  auto spec = message.initRoot<schema::BucketSpec>();
  spec.setWorkers(1);
  spec.setBucketCount(1);
  spec.initOptimizer().setDashSolver(static_cast<schema::Optimizer::RootSolver>(9));
  BOOST_TEST(fails_with(decode<bucket_spec>(to_wire(message)), errc::malformed_message));

  // A valid start with only its collective out of range.
  const auto good = encode(some_group_start(collective_kind::gloo));
  BOOST_TEST_REQUIRE(succeeded(decode<group_start>(good)));
  auto words = kj::heapArray<capnp::word>(good.bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), good.bytes.data(), good.bytes.size());
  capnp::FlatArrayMessageReader reader(words);
  capnp::MallocMessageBuilder start_message;
  start_message.setRoot(reader.getRoot<schema::GroupStart>());
  start_message.getRoot<schema::GroupStart>().setCollective(
      static_cast<schema::GroupStart::Collective>(7));
  BOOST_TEST(fails_with(decode<group_start>(to_wire(start_message)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(every_collective_travels) {
  for (auto backend : {collective_kind::gloo, collective_kind::actors, collective_kind::nccl}) {
    auto y = decode<group_start>(encode(some_group_start(backend)));
    BOOST_TEST_REQUIRE(succeeded(y), to_string(backend));
    BOOST_TEST((y->collective == backend), to_string(backend));
  }
}

BOOST_AUTO_TEST_CASE(an_app_rule_travels_by_name) {
  bucket_spec x;
  x.workers = 1;
  x.optimizer.type = optimizer_config::kind::app;
  x.optimizer.rule = "clipped-sign";
  auto y = decode<bucket_spec>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST((y->optimizer.type == optimizer_config::kind::app));
  BOOST_TEST(y->optimizer.rule == "clipped-sign");
  x.optimizer.rule.clear();  // kind app names its rule
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(x)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(hello_carries_the_schema_version) {
  auto y = decode<hello>(encode(hello{role::worker, "w", std::vector<uint8_t>(32, 1)}));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->schema_version == wire_schema_version);
  capnp::MallocMessageBuilder message;  // a node from before the field: version 0
  auto old = message.initRoot<schema::Hello>();
  old.setName("old");
  old.initNodeNonce(32);
  auto z = decode<hello>(to_wire(message));
  BOOST_TEST_REQUIRE(succeeded(z));
  BOOST_TEST(z->schema_version == 0u);
  // The gatekeeper's challenge carries its version too, for the joining node to check.
  auto c = decode<challenge>(encode(challenge{7, std::vector<uint8_t>(32, 2), {1, 2}}));
  BOOST_TEST_REQUIRE(succeeded(c));
  BOOST_TEST(c->schema_version == wire_schema_version);
}

BOOST_AUTO_TEST_SUITE_END()
