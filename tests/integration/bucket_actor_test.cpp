// The parameter bucket: its update math against a double-precision reference, staleness from
// vector clocks, a real bucket actor refusing every kind of malformed push while its
// parameters stay exactly as they were, in-process pushes and pulls that are never
// serialised, and admissions of late ranks that arrive out of order.
#define BOOST_TEST_MODULE bucket_actor
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/scoped_actor.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/parameter_bucket.hpp"
#include "tests/integration/bucket_fixture.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/node.hpp"

using namespace troupe;
using troupe::testing::bucket_actor_fixture;
using troupe::testing::fails_with;
using troupe::testing::is_error;
using troupe::testing::push_for;
using troupe::testing::two_slice_spec;

namespace {

// Adam in double precision, written out from the paper, for comparison.
struct adam_reference {
  std::vector<double> theta, m, v;
  void step(const std::vector<float>& g, const optimizer_config& o, int t) {
    for (size_t i = 0; i < theta.size(); ++i) {
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * double(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(double(o.beta1), t));
      const double vhat = v[i] / (1 - std::pow(double(o.beta2), t));
      theta[i] -= o.lr * mhat / (std::sqrt(vhat) + o.epsilon);
    }
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(adam_updates_match_a_double_precision_reference) {
  optimizer_config opt;
  opt.lr = 0.01f;
  const auto spec = two_slice_spec(opt);
  bucket_store store{spec};
  std::vector<adam_reference> ref;
  for (const auto& t : spec.tensors)
    ref.push_back({std::vector<double>(t.values.begin(), t.values.end()),
                   std::vector<double>(t.values.size()), std::vector<double>(t.values.size())});
  for (int t = 1; t <= 5; ++t) {
    const auto push = push_for(spec, t % 2, 1.0f + 0.5f * t);
    BOOST_TEST_REQUIRE(testing::succeeded(store.apply(push)));
    for (size_t s = 0; s < ref.size(); ++s) ref[s].step(push.dense[s].values, opt, t);
  }
  const auto& slices = store.slices();
  for (size_t s = 0; s < ref.size(); ++s)
    for (size_t i = 0; i < ref[s].theta.size(); ++i)
      BOOST_TEST(slices[s].values[i] == ref[s].theta[i], boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(sgd_momentum_updates_match_the_formula) {
  optimizer_config opt;
  opt.type = optimizer_config::kind::momentum;
  opt.lr = 0.1f;
  opt.beta1 = 0.9f;
  const auto spec = two_slice_spec(opt);
  bucket_store store{spec};
  const auto g1 = push_for(spec, 0, 1.0f);
  const auto g2 = push_for(spec, 1, 2.0f);
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(g1)));
  BOOST_TEST_REQUIRE(testing::succeeded(store.apply(g2)));
  for (size_t s = 0; s < spec.tensors.size(); ++s) {
    for (size_t i = 0; i < spec.tensors[s].values.size(); ++i) {
      const double u1 = g1.dense[s].values[i];
      const double u2 = 0.9 * u1 + g2.dense[s].values[i];
      const double expected = spec.tensors[s].values[i] - 0.1 * u1 - 0.1 * u2;
      BOOST_TEST(store.slices()[s].values[i] == expected, boost::test_tools::tolerance(1e-5));
    }
  }
}

BOOST_AUTO_TEST_CASE(staleness_counts_updates_since_the_read) {
  bucket_store store{two_slice_spec(optimizer_config{})};
  const vector_clock start = store.snapshot().clock;
  auto first = store.apply(push_for(two_slice_spec({}), 0, 1.0f, start));
  BOOST_TEST_REQUIRE(testing::succeeded(first));
  BOOST_TEST(first->staleness == 0u);
  auto second = store.apply(push_for(two_slice_spec({}), 1, 1.0f, start));
  BOOST_TEST_REQUIRE(testing::succeeded(second));
  BOOST_TEST(second->staleness == 1u);
  const auto stats = store.stats();
  BOOST_TEST(stats.clock.at(0) == 1u);
  BOOST_TEST(stats.clock.at(1) == 1u);
  BOOST_TEST(stats.max_staleness == 1u);
  BOOST_TEST(stats.updates_applied == 2u);
}

BOOST_FIXTURE_TEST_CASE(a_bucket_actor_refuses_malformed_pushes_and_keeps_its_values,
                        bucket_actor_fixture) {
  const auto timeout = std::chrono::seconds(10);

  auto push = [&](const wire& w) {
    caf::error result;
    self->request(bucket, timeout, push_atom_v, w)
        .receive([&](const wire&) {}, [&](caf::error& err) { result = std::move(err); });
    return result;
  };
  std::mt19937 rng{42};
  wire random_bytes;
  for (int i = 0; i < 512; ++i) random_bytes.bytes.push_back(static_cast<char>(rng()));
  wire truncated = encode(push_for(spec, 0, 1.0f));
  truncated.bytes.resize(truncated.bytes.size() / 2);
  auto wrong_shape = push_for(spec, 0, 1.0f);
  wrong_shape.dense[0].shape = {3, 2};
  auto too_big = push_for(spec, 0, 1.0f);
  too_big.dense[0].values.resize(6000);
  too_big.dense[0].shape = {1000, 6};
  auto with_nan = push_for(spec, 0, 1.0f);
  with_nan.dense[1].values[1] = std::numeric_limits<float>::quiet_NaN();
  auto with_inf = push_for(spec, 1, 1.0f);
  with_inf.dense[0].values[0] = std::numeric_limits<float>::infinity();
  auto other_bucket = push_for(spec, 0, 1.0f);
  other_bucket.bucket = 8;
  auto unknown_worker = push_for(spec, 5, 1.0f);
  auto huge = push_for(spec, 0, 1.0f);
  huge.dense[0].values[2] = 3e30f;  // finite, but Adam's g*g would overflow

  BOOST_TEST(static_cast<bool>(push(random_bytes)));  // some error: random bytes are no push
  BOOST_TEST(is_error(push(truncated), errc::malformed_message));
  BOOST_TEST(is_error(push(encode(wrong_shape)), errc::shape_mismatch));
  BOOST_TEST(is_error(push(encode(too_big)), errc::message_too_large));
  BOOST_TEST(is_error(push(encode(with_nan)), errc::non_finite));
  BOOST_TEST(is_error(push(encode(with_inf)), errc::non_finite));
  BOOST_TEST(is_error(push(encode(other_bucket)), errc::unknown_bucket));
  BOOST_TEST(is_error(push(encode(unknown_worker)), errc::malformed_message));
  BOOST_TEST(is_error(push(encode(huge)), errc::non_finite));

  caf::expected<pull_reply> snapshot = make_error(errc::timeout);
  self->request(bucket, timeout, pull_atom_v, encode(pull_request{7, 0}))
      .receive([&](const wire& w) { snapshot = decode<pull_reply>(w); },
               [&](caf::error& err) { snapshot = std::move(err); });
  BOOST_TEST_REQUIRE(testing::succeeded(snapshot));
  BOOST_TEST_REQUIRE(snapshot->tensors.size() == spec.tensors.size());
  for (size_t s = 0; s < spec.tensors.size(); ++s)
    BOOST_TEST(snapshot->tensors[s].values == spec.tensors[s].values,
               boost::test_tools::per_element());
  BOOST_TEST(snapshot->version == 0u);

  BOOST_TEST(!static_cast<bool>(push(encode(push_for(spec, 0, 1.0f)))));  // still works
  caf::expected<bucket_stats> stats = make_error(errc::timeout);
  self->request(bucket, timeout, stats_atom_v)
      .receive([&](const wire& w) { stats = decode<bucket_stats>(w); },
               [&](caf::error& err) { stats = std::move(err); });
  BOOST_TEST_REQUIRE(testing::succeeded(stats));
  BOOST_TEST(stats->updates_rejected == 9u);
  BOOST_TEST(stats->updates_applied == 1u);
}

// Between actors of one process a push and a pull travel as local wires: no bytes at all,
// the replies local too, and the bucket's own checks refuse what the codec would have.
BOOST_FIXTURE_TEST_CASE(in_process_pushes_and_pulls_are_not_serialised_and_are_checked_the_same,
                        bucket_actor_fixture) {
  const auto timeout = std::chrono::seconds(10);
  auto ask = [&](auto atom, const wire& w) {
    caf::expected<wire> result = make_error(errc::timeout);
    self->request(bucket, timeout, atom, w)
        .receive([&](const wire& reply) { result = reply; },
                 [&](caf::error& err) { result = std::move(err); });
    return result;
  };

  auto with_nan = push_for(spec, 0, 1.0f);
  with_nan.dense[1].values[1] = std::numeric_limits<float>::quiet_NaN();
  auto wrong_shape = push_for(spec, 0, 1.0f);
  wrong_shape.dense[0].values.resize(6000);
  BOOST_TEST(fails_with(ask(push_atom_v, local_wire(with_nan)), errc::non_finite));
  BOOST_TEST(fails_with(ask(push_atom_v, local_wire(wrong_shape)), errc::shape_mismatch));
  BOOST_TEST(fails_with(ask(push_atom_v, local_wire(push_ack{7, 0, 0})), errc::malformed_message));

  const auto push = push_for(spec, 0, 1.0f);
  auto ack = ask(push_atom_v, local_wire(push));
  BOOST_TEST_REQUIRE(testing::succeeded(ack));
  BOOST_TEST(ack->bytes.empty());
  BOOST_TEST_REQUIRE(ack->local != nullptr);
  BOOST_TEST(std::get<push_ack>(*ack->local).version == 1u);

  auto local = ask(pull_atom_v, local_wire(pull_request{7, 0, 0, {}}));
  auto remote = ask(pull_atom_v, encode(pull_request{7, 1, 0, {}}));
  BOOST_TEST_REQUIRE(testing::succeeded(local));
  BOOST_TEST_REQUIRE(testing::succeeded(remote));
  BOOST_TEST(local->bytes.empty());
  BOOST_TEST(remote->local == nullptr);  // asked with bytes, answered with bytes
  auto from_local = decode<pull_reply>(*local);
  auto from_bytes = decode<pull_reply>(*remote);
  BOOST_TEST_REQUIRE(testing::succeeded(from_local));
  BOOST_TEST_REQUIRE(testing::succeeded(from_bytes));
  for (size_t s = 0; s < spec.tensors.size(); ++s)
    BOOST_TEST(from_local->tensors[s].values == from_bytes->tensors[s].values,
               boost::test_tools::per_element());

  // Only the bytes are serialised: a local wire sent out of the process arrives empty.
  std::vector<char> buffer;
  caf::binary_serializer sink{sys, buffer};
  wire out = local_wire(push);
  BOOST_TEST_REQUIRE(!sink(out));
  wire in;
  caf::binary_deserializer source{sys, buffer};
  BOOST_TEST_REQUIRE(!source(in));
  BOOST_TEST(in.local == nullptr);
  BOOST_TEST(fails_with(decode<push_request>(in), errc::malformed_message));
  BOOST_TEST(encoded(out).bytes == encode(push).bytes);
}

BOOST_FIXTURE_TEST_CASE(an_admission_that_overtakes_an_earlier_one_admits_the_ranks_between,
                        bucket_actor_fixture) {
  // Rank 2's admission went to a primary lost meanwhile and comes again after rank 3's.
  auto admit = [&](uint32_t rank) {
    std::optional<uint64_t> start;
    self->request(bucket, std::chrono::seconds(10), admit_atom_v, rank)
        .receive([&](uint64_t s) { start = s; }, [](caf::error&) {});
    return start;
  };
  BOOST_TEST(admit(3).has_value());
  BOOST_TEST(admit(2).has_value());          // found as a rejoin
  BOOST_TEST(!admit(1u << 16).has_value());  // beyond any job
}
