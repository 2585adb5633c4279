// Unit tests of the message codec (messages/codec.hpp): every message type round-trips with all
// its fields; tensors round-trip in f32 exactly and in bf16 / f16 within the format's precision;
// and every rejection path returns its specific troupe::errc, never a crash. Messages the
// encoder cannot produce (wrong data sizes, unknown enum values) are built with Cap'n Proto.
#define BOOST_TEST_MODULE codec
#include <boost/test/unit_test.hpp>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "expect_error.hpp"
#include "messages/codec.hpp"
#include "messages/codec_detail.hpp"
#include "messages/troupe.capnp.h"
#include "random_values.hpp"

using namespace troupe;
using troupe::detail::to_wire;  // the codec's framing, for messages built by hand
using troupe::testing::fails_with;
using troupe::testing::succeeded;
namespace tt = boost::test_tools;

namespace {

constexpr float nan_value = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_value = std::numeric_limits<float>::infinity();

// -- building inputs ----------------------------------------------------------------------------

using troupe::testing::random_values;

dense_tensor make_dense(std::string name, std::vector<uint32_t> shape, uint32_t row_offset = 0,
                        uint32_t seed = 1) {
  dense_tensor t{std::move(name), std::move(shape), row_offset, {}};
  t.values = random_values(numel(t.shape), seed);
  return t;
}

push_request make_push(std::vector<dense_tensor> dense) {
  push_request x;
  x.bucket = 3;
  x.worker = 1;
  x.worker_clock = 17;
  x.read_clock = vector_clock{std::vector<uint64_t>{4, 5}};
  x.dense = std::move(dense);
  return x;
}

// A push whose one dense tensor has `shape`, storage `type` and `data_bytes` bytes of zeros.
wire raw_dense_push(std::vector<uint32_t> shape, schema::DType type, size_t data_bytes) {
  capnp::MallocMessageBuilder message;
  auto push = message.initRoot<schema::PushRequest>();
  auto t = push.initDense(1)[0];
  t.setName("w");
  auto dims = t.initShape(shape.size());
  for (unsigned i = 0; i < shape.size(); ++i) dims.set(i, shape[i]);
  t.setDtype(type);
  t.initData(data_bytes);
  return to_wire(message);
}

// -- comparing outputs --------------------------------------------------------------------------

std::vector<uint64_t> entries_of(const vector_clock& c) {
  return {c.entries().begin(), c.entries().end()};
}

// Relative precision of each storage format (half an ulp at the low end of each binade, doubled
// for margin), and the absolute floor below which f16 goes subnormal.
struct precision {
  double rel = 0;
  double abs = 0;
};
precision precision_of(dtype type) {
  switch (type) {
    case dtype::f32:
      return {0, 0};
    case dtype::bf16:
      return {std::ldexp(1.0, -8), 0};
    case dtype::f16:
      return {std::ldexp(1.0, -10), std::ldexp(1.0, -24)};
    case dtype::i8:  // relative to its block's largest value (check_values)
      return {1.0 / 254 * 1.001, 0};
  }
  return {};
}

void check_values(const std::vector<float>& got, const std::vector<float>& want, dtype storage) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  const precision p = precision_of(storage);
  // int8 rounds each value to a 254th of its block's largest.
  auto scale_of = [&](size_t i) -> double {
    if (storage != dtype::i8) return std::abs(want[i]);
    const size_t first = i / int8_block_values * int8_block_values;
    double most = 0;
    for (size_t k = first; k < std::min<size_t>(first + int8_block_values, want.size()); ++k)
      most = std::max(most, double{std::abs(want[k])});
    return most;
  };
  for (size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(double{got[i]} - double{want[i]});
    if (error > p.rel * scale_of(i) + p.abs) {
      BOOST_TEST(got[i] == want[i], "element " << i << " in " << int(storage));
      return;
    }
  }
}

void check_dense(const dense_tensor& got, const dense_tensor& want, dtype storage = dtype::f32) {
  BOOST_TEST(got.name == want.name);
  BOOST_TEST(got.shape == want.shape, tt::per_element());
  BOOST_TEST(got.row_offset == want.row_offset);
  check_values(got.values, want.values, storage);
}

void check_sparse(const sparse_rows& got, const sparse_rows& want, dtype storage = dtype::f32) {
  BOOST_TEST(got.name == want.name);
  BOOST_TEST(got.row_dim == want.row_dim);
  BOOST_TEST(got.ids == want.ids, tt::per_element());
  check_values(got.values, want.values, storage);
}

void check_sign(const sign_tensor& got, const sign_tensor& want) {
  BOOST_TEST(got.name == want.name);
  BOOST_TEST(got.shape == want.shape, tt::per_element());
  BOOST_TEST(got.row_offset == want.row_offset);
  BOOST_TEST(got.scale == want.scale);
  BOOST_TEST(got.bits == want.bits, tt::per_element());
}

void check_push(const push_request& got, const push_request& want, dtype storage) {
  BOOST_TEST(got.bucket == want.bucket);
  BOOST_TEST(got.worker == want.worker);
  BOOST_TEST(got.worker_clock == want.worker_clock);
  BOOST_TEST(entries_of(got.read_clock) == entries_of(want.read_clock), tt::per_element());
  BOOST_TEST_REQUIRE(got.dense.size() == want.dense.size());
  for (size_t i = 0; i < got.dense.size(); ++i) check_dense(got.dense[i], want.dense[i], storage);
  BOOST_TEST_REQUIRE(got.sparse.size() == want.sparse.size());
  for (size_t i = 0; i < got.sparse.size(); ++i)
    check_sparse(got.sparse[i], want.sparse[i], storage);
  BOOST_TEST_REQUIRE(got.signs.size() == want.signs.size());
  for (size_t i = 0; i < got.signs.size(); ++i) check_sign(got.signs[i], want.signs[i]);
}

void check_placement(const placement& got, const placement& want) {
  BOOST_TEST(got.version == want.version);
  BOOST_TEST_REQUIRE(got.buckets.size() == want.buckets.size());
  for (size_t b = 0; b < got.buckets.size(); ++b) {
    BOOST_TEST(got.buckets[b].bucket == want.buckets[b].bucket);
    BOOST_TEST(got.buckets[b].server == want.buckets[b].server);
    BOOST_TEST_REQUIRE(got.buckets[b].slices.size() == want.buckets[b].slices.size());
    for (size_t s = 0; s < got.buckets[b].slices.size(); ++s) {
      const auto& g = got.buckets[b].slices[s];
      const auto& w = want.buckets[b].slices[s];
      BOOST_TEST(g.tensor == w.tensor);
      BOOST_TEST(g.row_offset == w.row_offset);
      BOOST_TEST(g.shape == w.shape, tt::per_element());
    }
  }
}

placement make_placement(uint32_t buckets, uint32_t slices_per_bucket) {
  placement p;
  p.version = 9;
  for (uint32_t b = 0; b < buckets; ++b) {
    bucket_placement bp{b, b % 3, {}};
    for (uint32_t s = 0; s < slices_per_bucket; ++s)
      bp.slices.push_back(slice{"fc" + std::to_string(s) + ".w", 10 * b, {10, 784}});
    p.buckets.push_back(std::move(bp));
  }
  return p;
}

job_report make_report(uint32_t epochs) {
  job_report r;
  r.test_accuracy = 0.875;
  r.steps = 1234;
  r.wall_s = 12.5;
  r.updates_applied = 1000;
  r.updates_rejected = 3;
  r.max_staleness = 7;
  r.mean_staleness = 1.25;
  r.restarts = 1;
  r.workers_lost = {"worker-2", "worker-5"};
  for (uint32_t e = 0; e < epochs; ++e)
    r.epochs.push_back(epoch_entry{e, 0.5 + e * 0.01, 1.0 / (e + 1), 2.0 / (e + 1), 3.0 * e});
  return r;
}

void check_report(const job_report& got, const job_report& want) {
  BOOST_TEST(got.test_accuracy == want.test_accuracy);
  BOOST_TEST(got.steps == want.steps);
  BOOST_TEST(got.wall_s == want.wall_s);
  BOOST_TEST(got.updates_applied == want.updates_applied);
  BOOST_TEST(got.updates_rejected == want.updates_rejected);
  BOOST_TEST(got.max_staleness == want.max_staleness);
  BOOST_TEST(got.mean_staleness == want.mean_staleness);
  BOOST_TEST(got.restarts == want.restarts);
  BOOST_TEST(got.workers_lost == want.workers_lost, tt::per_element());
  BOOST_TEST_REQUIRE(got.epochs.size() == want.epochs.size());
  for (size_t i = 0; i < got.epochs.size(); ++i) {
    BOOST_TEST(got.epochs[i].epoch == want.epochs[i].epoch);
    BOOST_TEST(got.epochs[i].test_accuracy == want.epochs[i].test_accuracy);
    BOOST_TEST(got.epochs[i].test_loss == want.epochs[i].test_loss);
    BOOST_TEST(got.epochs[i].train_loss == want.epochs[i].train_loss);
    BOOST_TEST(got.epochs[i].wall_s == want.epochs[i].wall_s);
  }
}

bool is_troupe_decode_error(const caf::error& err) {
  if (err.category() != error_category) return false;
  switch (static_cast<errc>(err.code())) {
    case errc::malformed_message:
    case errc::message_too_large:
    case errc::shape_mismatch:
    case errc::non_finite:
      return true;
    default:
      return false;
  }
}

}  // namespace

// == round trips of every message type =========================================================

BOOST_AUTO_TEST_SUITE(round_trip)

BOOST_AUTO_TEST_CASE(pull_request_fields) {
  const pull_request x{7, 3};
  auto y = decode<pull_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->bucket == 7u);
  BOOST_TEST(y->worker == 3u);
}

BOOST_AUTO_TEST_CASE(pull_reply_fields) {
  pull_reply x;
  x.bucket = 2;
  x.version = uint64_t{1} << 40;
  x.clock = vector_clock{std::vector<uint64_t>{1, 0, 9}};
  x.tensors = {make_dense("fc1.w", {3, 5}, 6, 1), make_dense("fc1.b", {5}, 0, 2)};
  auto y = decode<pull_reply>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->bucket == 2u);
  BOOST_TEST(y->version == x.version);
  BOOST_TEST(entries_of(y->clock) == entries_of(x.clock), tt::per_element());
  BOOST_TEST_REQUIRE(y->tensors.size() == 2u);
  check_dense(y->tensors[0], x.tensors[0]);
  check_dense(y->tensors[1], x.tensors[1]);
}

BOOST_AUTO_TEST_CASE(push_request_fields) {
  push_request x = make_push({make_dense("a", {4, 3}, 2, 5)});
  x.sparse = {sparse_rows{"emb", 2, {0, 9, uint64_t{1} << 50}, random_values(6, 3)}};
  x.signs = {sign_tensor{"s", {2, 5}, 4, 0.25f, {0xa5, 0x03}}};
  auto y = decode<push_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_push(*y, x, dtype::f32);
}

BOOST_AUTO_TEST_CASE(push_request_without_tensors) {
  const push_request x = make_push({});
  auto y = decode<push_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_push(*y, x, dtype::f32);
}

// Found by tests/fuzz codec_fuzz: a tensor with a zero dimension has no values, and encoding
// it copied from an empty vector's null pointer.
BOOST_AUTO_TEST_CASE(a_tensor_with_a_zero_dimension_round_trips) {
  bucket_state_part x;
  x.bucket = 2;
  x.type = bucket_state_part::kind::first_moment;
  x.tensors.push_back(dense_tensor{"w", {0, 3}, 0, {}});
  auto y = decode<bucket_state_part>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST_REQUIRE(y->tensors.size() == 1u);
  BOOST_TEST(y->tensors[0].values.empty());
  BOOST_TEST((y->tensors[0].shape == std::vector<uint32_t>{0, 3}));
}

BOOST_AUTO_TEST_CASE(push_ack_fields) {
  const push_ack x{5, 123456789012ull, 42};
  auto y = decode<push_ack>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->bucket == 5u);
  BOOST_TEST(y->version == 123456789012ull);
  BOOST_TEST(y->staleness == 42u);
}

BOOST_AUTO_TEST_CASE(bucket_spec_adam) {
  bucket_spec x;
  x.bucket = 4;
  x.workers = 8;
  x.optimizer = {optimizer_config::kind::adam, 0.01f, 0.8f, 0.99f, 1e-7f, 0.05f};
  x.tensors = {make_dense("fc2.w", {7, 3}, 14, 9)};
  auto y = decode<bucket_spec>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->bucket == 4u);
  BOOST_TEST(y->workers == 8u);
  BOOST_TEST((y->optimizer.type == optimizer_config::kind::adam));
  BOOST_TEST(y->optimizer.lr == 0.01f);
  BOOST_TEST(y->optimizer.beta1 == 0.8f);
  BOOST_TEST(y->optimizer.beta2 == 0.99f);
  BOOST_TEST(y->optimizer.epsilon == 1e-7f);
  BOOST_TEST(y->optimizer.weight_decay == 0.05f);
  BOOST_TEST_REQUIRE(y->tensors.size() == 1u);
  check_dense(y->tensors[0], x.tensors[0]);
}

BOOST_AUTO_TEST_CASE(bucket_spec_sgd) {
  bucket_spec x;
  x.workers = 1;
  x.optimizer.type = optimizer_config::kind::sgd;
  x.optimizer.beta1 = 0.0f;
  auto y = decode<bucket_spec>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST((y->optimizer.type == optimizer_config::kind::sgd));
  BOOST_TEST(y->optimizer.beta1 == 0.0f);
  BOOST_TEST(y->tensors.empty());
}

BOOST_AUTO_TEST_CASE(bucket_spec_consistency_compensation_and_optimizer_kinds) {
  for (auto kind : {optimizer_config::kind::momentum, optimizer_config::kind::adamw}) {
    bucket_spec x;
    x.workers = 3;
    x.optimizer.type = kind;
    x.optimizer.lr_staleness = true;
    x.consistency = {consistency_config::mode::ssp, 4};
    x.compensation = {compensation_config::kind::dcasgd_adaptive, 0.5f};
    auto y = decode<bucket_spec>(encode(x));
    BOOST_TEST_REQUIRE(succeeded(y));
    BOOST_TEST((y->optimizer.type == kind));
    BOOST_TEST(y->optimizer.lr_staleness);
    BOOST_TEST((y->consistency.type == consistency_config::mode::ssp));
    BOOST_TEST(y->consistency.bound == 4u);
    BOOST_TEST((y->compensation.type == compensation_config::kind::dcasgd_adaptive));
    BOOST_TEST(y->compensation.lambda == 0.5f);
  }
}

BOOST_AUTO_TEST_CASE(pull_and_push_carry_clock_and_last) {
  auto pull = decode<pull_request>(encode(pull_request{3, 1, 77}));
  BOOST_TEST_REQUIRE(succeeded(pull));
  BOOST_TEST(pull->worker_clock == 77u);
  push_request push;
  push.last = true;
  auto decoded = decode<push_request>(encode(push));
  BOOST_TEST_REQUIRE(succeeded(decoded));
  BOOST_TEST(decoded->last);
}

BOOST_AUTO_TEST_CASE(bucket_stats_fields) {
  bucket_stats x{6,         100, 90, 10,   4, 55, vector_clock{std::vector<uint64_t>{30, 60}},
                 {5, 0, 2}, 3,   7,  0.125};
  auto y = decode<bucket_stats>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->bucket == 6u);
  BOOST_TEST(y->version == 100u);
  BOOST_TEST(y->updates_applied == 90u);
  BOOST_TEST(y->updates_rejected == 10u);
  BOOST_TEST(y->max_staleness == 4u);
  BOOST_TEST(y->staleness_sum == 55u);
  BOOST_TEST(entries_of(y->clock) == entries_of(x.clock), tt::per_element());
  BOOST_TEST(y->staleness_histogram == x.staleness_histogram, tt::per_element());
  BOOST_TEST(y->max_clock_gap == 3u);
  BOOST_TEST(y->updates_skipped == 7u);
  BOOST_TEST(y->update_variance == 0.125);
}

BOOST_AUTO_TEST_CASE(hello_fields) {
  for (role r : {role::coordinator, role::server, role::worker, role::console}) {
    const hello x{r, "node-" + to_string(r), std::vector<uint8_t>(32, 0x5a)};
    auto y = decode<hello>(encode(x));
    BOOST_TEST_REQUIRE(succeeded(y));
    BOOST_TEST((y->sender == r), to_string(r));
    BOOST_TEST(y->name == x.name);
    BOOST_TEST(y->node_nonce == x.node_nonce, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE(challenge_fields) {
  const challenge x{0xdeadbeefcafeull, std::vector<uint8_t>(32, 1), std::vector<uint8_t>(32, 2)};
  auto y = decode<challenge>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->session == x.session);
  BOOST_TEST(y->gatekeeper_nonce == x.gatekeeper_nonce, tt::per_element());
  BOOST_TEST(y->gatekeeper_proof == x.gatekeeper_proof, tt::per_element());
}

BOOST_AUTO_TEST_CASE(proof_fields) {
  const proof x{77, {9, 8, 7, 6, 5}};
  auto y = decode<proof>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->session == 77u);
  BOOST_TEST(y->node_proof == x.node_proof, tt::per_element());
}

BOOST_AUTO_TEST_CASE(join_request_fields) {
  const join_request x{role::server, "server-1", 4242, endpoint{"127.0.0.2", 40123}};
  auto y = decode<join_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST((y->sender == role::server));
  BOOST_TEST(y->name == "server-1");
  BOOST_TEST(y->pid == 4242u);
  BOOST_TEST(y->data.host == "127.0.0.2");
  BOOST_TEST(y->data.port == 40123u);
}

BOOST_AUTO_TEST_CASE(join_reply_fields) {
  const join_reply x{3, 8, 2};
  auto y = decode<join_reply>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->rank == 3u);
  BOOST_TEST(y->world_workers == 8u);
  BOOST_TEST(y->world_servers == 2u);
}

BOOST_AUTO_TEST_CASE(heartbeat_fields) {
  const heartbeat x{"worker-0", 99, 1700000000123ull};
  auto y = decode<heartbeat>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->name == "worker-0");
  BOOST_TEST(y->sequence == 99u);
  BOOST_TEST(y->sent_unix_ms == 1700000000123ull);
}

BOOST_AUTO_TEST_CASE(placement_fields) {
  const placement x = make_placement(3, 2);
  auto y = decode<placement>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_placement(*y, x);
}

BOOST_AUTO_TEST_CASE(placement_empty) {
  auto y = decode<placement>(encode(placement{}));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->version == 0u);
  BOOST_TEST(y->buckets.empty());
}

BOOST_AUTO_TEST_CASE(start_job_fields) {
  start_job x{1,
              4,
              10,
              64,
              0x1234567890ull,
              make_placement(2, 3),
              {endpoint{"127.0.0.1", 4000}, endpoint{"", 0}}};
  x.workers_on_host = 3;
  x.pulls_held = true;
  auto y = decode<start_job>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->worker == 1u);
  BOOST_TEST(y->workers == 4u);
  BOOST_TEST(y->epochs == 10u);
  BOOST_TEST(y->batch == 64u);
  BOOST_TEST(y->seed == 0x1234567890ull);
  check_placement(y->layout, x.layout);
  BOOST_TEST_REQUIRE(y->servers.size() == 2u);
  BOOST_TEST(y->servers[0].host == "127.0.0.1");
  BOOST_TEST(y->servers[0].port == 4000u);
  BOOST_TEST(y->servers[1].port == 0u);
  BOOST_TEST(y->workers_on_host == 3u);
  BOOST_TEST(y->pulls_held);
}

BOOST_AUTO_TEST_CASE(work_lease_fields) {
  const work_lease x{{work_chunk{5, 1234567890123ull, 8}, work_chunk{5, 1234567890131ull, 2}}};
  auto y = decode<work_lease>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST_REQUIRE(y->chunks.size() == 2u);
  BOOST_TEST((y->chunks[0] == x.chunks[0]));
  BOOST_TEST((y->chunks[1] == x.chunks[1]));
  auto none = decode<work_lease>(encode(work_lease{}));
  BOOST_TEST_REQUIRE(succeeded(none));
  BOOST_TEST(none->chunks.empty());
}

BOOST_AUTO_TEST_CASE(a_lease_with_an_empty_chunk_is_refused) {
  auto y = decode<work_lease>(encode(work_lease{{work_chunk{0, 0, 1}, work_chunk{0, 1, 0}}}));
  BOOST_TEST(fails_with(y, errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(progress_batch_fields) {
  const progress_batch x{{progress{2, work_chunk{5, 1000, 4}, 1.25, 3.5, 7.25, 0.75, 12},
                          progress{2, work_chunk{5, 1004, 4}, 2.5, 3.75, 7.5, 1.5, 13}}};
  auto y = decode<progress_batch>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST_REQUIRE(y->reports.size() == 2u);
  const auto& a = y->reports[0];
  BOOST_TEST(a.worker == 2u);
  BOOST_TEST((a.chunk == x.reports[0].chunk));
  BOOST_TEST(a.loss_sum == 1.25);
  BOOST_TEST(a.compute_s == 3.5);
  BOOST_TEST(a.wall_s == 7.25);
  BOOST_TEST(a.staleness == 0.75);
  BOOST_TEST(a.clock == 12u);
  BOOST_TEST((y->reports[1].chunk == x.reports[1].chunk));
  BOOST_TEST(y->reports[1].clock == 13u);
}

BOOST_AUTO_TEST_CASE(progress_keeps_non_finite_loss) {
  // A diverged worker's loss is information, not corruption.
  auto y =
      decode<progress_batch>(encode(progress_batch{{progress{0, work_chunk{1, 2, 1}, nan_value}}}));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(std::isnan(y->reports.at(0).loss_sum));
}

BOOST_AUTO_TEST_CASE(job_report_fields) {
  const job_report x = make_report(3);
  auto y = decode<job_report>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_report(*y, x);
}

BOOST_AUTO_TEST_CASE(job_report_empty) {
  auto y = decode<job_report>(encode(job_report{}));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_report(*y, job_report{});
}

BOOST_AUTO_TEST_SUITE_END()

// == tensors and clocks =========================================================================

BOOST_AUTO_TEST_SUITE(tensors)

// Round-trips one dense tensor of `shape` inside a push stored as `storage`.
void dense_round_trip(std::vector<uint32_t> shape, dtype storage) {
  const push_request x = make_push({make_dense("t", std::move(shape), 1, 11)});
  auto y = decode<push_request>(encode(x, encode_options{storage}));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_push(*y, x, storage);
}

BOOST_AUTO_TEST_CASE(dense_f32_size_0) {
  dense_round_trip({0}, dtype::f32);
}
BOOST_AUTO_TEST_CASE(dense_f32_size_0_matrix) {
  dense_round_trip({0, 4}, dtype::f32);
}
BOOST_AUTO_TEST_CASE(dense_f32_size_1) {
  dense_round_trip({1}, dtype::f32);
}
BOOST_AUTO_TEST_CASE(dense_f32_scalar) {
  dense_round_trip({}, dtype::f32);
}
BOOST_AUTO_TEST_CASE(dense_f32_odd) {
  dense_round_trip({3, 7}, dtype::f32);
}
BOOST_AUTO_TEST_CASE(dense_bf16_size_0) {
  dense_round_trip({0}, dtype::bf16);
}
BOOST_AUTO_TEST_CASE(dense_bf16_size_1) {
  dense_round_trip({1}, dtype::bf16);
}
BOOST_AUTO_TEST_CASE(dense_bf16_odd) {
  dense_round_trip({3, 7}, dtype::bf16);
}
BOOST_AUTO_TEST_CASE(dense_f16_size_0) {
  dense_round_trip({0}, dtype::f16);
}
BOOST_AUTO_TEST_CASE(dense_f16_size_1) {
  dense_round_trip({1}, dtype::f16);
}
BOOST_AUTO_TEST_CASE(dense_f16_odd) {
  dense_round_trip({3, 7}, dtype::f16);
}
BOOST_AUTO_TEST_CASE(dense_f16_large_odd) {
  dense_round_trip({1001}, dtype::f16);
}

BOOST_AUTO_TEST_CASE(dense_i8_size_0) {
  dense_round_trip({0}, dtype::i8);
}
BOOST_AUTO_TEST_CASE(dense_i8_size_1) {
  dense_round_trip({1}, dtype::i8);
}
BOOST_AUTO_TEST_CASE(dense_i8_blocks_and_a_short_one) {
  dense_round_trip({1001}, dtype::i8);
}

BOOST_AUTO_TEST_CASE(i8_storage_is_a_byte_a_value_and_a_scale_a_block) {
  const push_request x = make_push({make_dense("t", {1000})});
  const size_t f32 = encode(x).bytes.size();
  const size_t i8 = encode(x, encode_options{dtype::i8}).bytes.size();
  BOOST_TEST(f32 - i8 == 4000u - (1000u + 4 * 4));
  const dense_tensor zeros{"z", {300}, 0, std::vector<float>(300, 0.0f)};
  auto y = decode<pull_reply>(encode(pull_reply{0, 0, {}, {zeros}}, encode_options{dtype::i8}));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->tensors.at(0).values == zeros.values, tt::per_element());
}

BOOST_AUTO_TEST_CASE(f32_round_trip_is_bit_exact) {
  dense_tensor t{"t", {6}, 0, {0.0f, -0.0f, 1e-38f, -3.4e38f, 1.0f / 3.0f, 1e-45f}};
  auto y = decode<pull_reply>(encode(pull_reply{0, 0, {}, {t}}));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST_REQUIRE(y->tensors.size() == 1u);
  BOOST_TEST(std::memcmp(y->tensors[0].values.data(), t.values.data(), 6 * sizeof(float)) == 0);
}

BOOST_AUTO_TEST_CASE(bf16_and_f16_keep_exact_values_exact) {
  const dense_tensor t{"t", {5}, 0, {0.0f, 1.0f, -2.0f, 0.5f, 1024.0f}};
  for (dtype storage : {dtype::bf16, dtype::f16}) {
    auto y = decode<pull_reply>(encode(pull_reply{0, 0, {}, {t}}, encode_options{storage}));
    BOOST_TEST_REQUIRE(succeeded(y));
    BOOST_TEST(y->tensors.at(0).values == t.values, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE(half_storage_halves_the_payload) {
  const push_request x = make_push({make_dense("t", {1000})});
  const size_t f32 = encode(x).bytes.size();
  const size_t bf16 = encode(x, encode_options{dtype::bf16}).bytes.size();
  const size_t f16 = encode(x, encode_options{dtype::f16}).bytes.size();
  BOOST_TEST(f32 - bf16 == 2000u);
  BOOST_TEST(f16 == bf16);
}

BOOST_AUTO_TEST_CASE(pull_reply_bf16) {
  pull_reply x{1, 2, vector_clock{std::vector<uint64_t>{3}}, {make_dense("w", {5, 3}, 0, 4)}};
  auto y = decode<pull_reply>(encode(x, encode_options{dtype::bf16}));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_dense(y->tensors.at(0), x.tensors[0], dtype::bf16);
}

BOOST_AUTO_TEST_CASE(f16_overflow_is_rejected_on_decode) {
  // 1e5 is beyond fp16's range: it is stored as Inf, which decoding refuses.
  const push_request x = make_push({dense_tensor{"t", {2}, 0, {1.0f, 1e5f}}});
  BOOST_TEST(
      fails_with(decode<push_request>(encode(x, encode_options{dtype::f16})), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(sparse_rows_in_each_storage) {
  push_request x = make_push({});
  x.sparse = {sparse_rows{"emb", 3, {2, 0, 77}, random_values(9, 8)},
              sparse_rows{"empty", 3, {}, {}}};
  for (dtype storage : {dtype::f32, dtype::bf16, dtype::f16}) {
    auto y = decode<push_request>(encode(x, encode_options{storage}));
    BOOST_TEST_REQUIRE(succeeded(y));
    check_push(*y, x, storage);
  }
}

BOOST_AUTO_TEST_CASE(sparse_rows_with_zero_row_dim) {
  push_request x = make_push({});
  x.sparse = {sparse_rows{"z", 0, {1, 2, 3}, {}}};
  auto y = decode<push_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_push(*y, x, dtype::f32);
}

BOOST_AUTO_TEST_CASE(sign_tensors_of_several_sizes) {
  push_request x = make_push({});
  x.signs = {sign_tensor{"scalar", {}, 0, 1.0f, {0x01}}, sign_tensor{"empty", {0}, 0, 1.0f, {}},
             sign_tensor{"byte", {8}, 0, 0.5f, {0xff}},
             sign_tensor{"odd", {3, 3}, 5, 2.0f, {0x55, 0x01}}};
  auto y = decode<push_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_push(*y, x, dtype::f32);
}

BOOST_AUTO_TEST_CASE(sign_tensor_storage_is_independent_of_dtype) {
  push_request x = make_push({});
  x.signs = {sign_tensor{"s", {9}, 0, 0.125f, {0x80, 0x01}}};
  auto y = decode<push_request>(encode(x, encode_options{dtype::f16}));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_push(*y, x, dtype::f16);
}

BOOST_AUTO_TEST_CASE(vector_clock_empty) {
  auto y = decode<bucket_stats>(encode(bucket_stats{}));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->clock.size() == 0u);
}

BOOST_AUTO_TEST_CASE(vector_clock_extreme_values) {
  bucket_stats x;
  x.clock = vector_clock{std::vector<uint64_t>{0, std::numeric_limits<uint64_t>::max(), 1}};
  auto y = decode<bucket_stats>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(entries_of(y->clock) == entries_of(x.clock), tt::per_element());
}

BOOST_AUTO_TEST_CASE(vector_clock_trailing_zeros_are_kept) {
  pull_reply x;
  x.clock = vector_clock{std::vector<uint64_t>{5, 0, 0}};
  auto y = decode<pull_reply>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->clock.size() == 3u);
}

BOOST_AUTO_TEST_CASE(vector_clock_many_entries) {
  push_request x = make_push({});
  std::vector<uint64_t> entries(1000);
  for (size_t i = 0; i < entries.size(); ++i) entries[i] = i * i;
  x.read_clock = vector_clock{entries};
  auto y = decode<push_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(entries_of(y->read_clock) == entries, tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// == rejections =================================================================================

BOOST_AUTO_TEST_SUITE(rejections)

BOOST_AUTO_TEST_CASE(empty_bytes) {
  const wire empty;
  BOOST_TEST(fails_with(decode<push_request>(empty), errc::malformed_message));
  BOOST_TEST(fails_with(decode<pull_request>(empty), errc::malformed_message));
  BOOST_TEST(fails_with(decode<hello>(empty), errc::malformed_message));
  BOOST_TEST(fails_with(decode<job_report>(empty), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(random_bytes_not_whole_words) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng{seed};
    std::vector<char> bytes(8 * (1 + rng() % 64) + 1 + rng() % 7);
    for (auto& b : bytes) b = static_cast<char>(rng());
    const wire w{wire_bytes(bytes.begin(), bytes.end())};
    BOOST_TEST(fails_with(decode<push_request>(w), errc::malformed_message), "seed " << seed);
    BOOST_TEST(fails_with(decode<placement>(w), errc::malformed_message), "seed " << seed);
  }
}

BOOST_AUTO_TEST_CASE(random_bytes_never_crash) {
  // Random whole words may happen to be a valid message; what matters is that every answer is
  // either a value or one of the codec's errors.
  std::mt19937 rng{12345};
  int errors = 0;
  for (int i = 0; i < 1000; ++i) {
    std::vector<char> bytes(8 * (1 + rng() % 32));
    for (auto& b : bytes) b = static_cast<char>(rng());
    // Half of the inputs get a plausible segment table (one segment of the right size), so
    // that the reader gets past framing and into the pointers.
    if (i % 2 == 0) {
      const uint32_t table[2] = {0, static_cast<uint32_t>(bytes.size() / 8 - 1)};
      std::memcpy(bytes.data(), table, sizeof table);
    }
    const wire w{wire_bytes(bytes.begin(), bytes.end())};
    auto check = [&](const auto& result) {
      if (result) return;
      ++errors;
      BOOST_TEST(is_troupe_decode_error(result.error()),
                 "input " << i << ": " << describe(result.error()));
    };
    check(decode<push_request>(w));
    check(decode<pull_reply>(w));
    check(decode<bucket_spec>(w));
    check(decode<placement>(w));
    check(decode<start_job>(w));
    check(decode<job_report>(w));
    check(decode<hello>(w));
  }
  BOOST_TEST(errors > 0);
}

BOOST_AUTO_TEST_CASE(segment_table_larger_than_the_message) {
  std::vector<char> bytes(32, 0);
  const uint32_t table[2] = {0, 1000};  // one segment of 1000 words, 3 present
  std::memcpy(bytes.data(), table, sizeof table);
  BOOST_TEST(fails_with(decode<push_request>(wire{wire_bytes(bytes.begin(), bytes.end())}),
                        errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(truncated_message) {
  push_request x = make_push({make_dense("w", {5, 3})});
  x.signs = {sign_tensor{"s", {9}, 0, 1.0f, {0x12, 0x01}}};
  const wire full = encode(x);
  BOOST_TEST_REQUIRE(succeeded(decode<push_request>(full)));
  for (size_t cut = 1; cut < full.bytes.size(); ++cut) {
    const wire w{wire_bytes(full.bytes.begin(), full.bytes.begin() + cut)};
    BOOST_TEST(fails_with(decode<push_request>(w), errc::malformed_message), "cut at " << cut);
  }
}

BOOST_AUTO_TEST_CASE(trailing_bytes) {
  wire w = encode(pull_request{1, 2});
  w.bytes.insert(w.bytes.end(), 8, '\0');
  BOOST_TEST(fails_with(decode<pull_request>(w), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(over_max_bytes) {
  const push_request x = make_push({make_dense("w", {300})});
  codec_limits limits;
  limits.max_bytes = 1024;
  BOOST_TEST(fails_with(decode<push_request>(encode(x), limits), errc::message_too_large));
  limits.max_bytes = encode(x).bytes.size();  // exactly at the cap is fine
  BOOST_TEST(succeeded(decode<push_request>(encode(x), limits)));
}

BOOST_AUTO_TEST_CASE(over_default_max_bytes) {
  // 4.2 M floats: a little over the default 16 MiB.
  const pull_reply x{
      0, 0, {}, {dense_tensor{"big", {4200000}, 0, std::vector<float>(4200000, 1.0f)}}};
  const wire w = encode(x);
  BOOST_TEST_REQUIRE(w.bytes.size() > codec_limits{}.max_bytes);
  BOOST_TEST(fails_with(decode<pull_reply>(w), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(over_max_elements_in_one_tensor) {
  codec_limits limits;
  limits.max_elements = 50;
  BOOST_TEST(fails_with(decode<push_request>(encode(make_push({make_dense("w", {51})})), limits),
                        errc::message_too_large));
  BOOST_TEST(succeeded(decode<push_request>(encode(make_push({make_dense("w", {50})})), limits)));
}

BOOST_AUTO_TEST_CASE(over_max_elements_in_one_shape_without_data) {
  // The shape alone claims 2^32 elements; it must be refused before any data is looked at.
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({65536, 65536}, schema::DType::F32, 0)),
                        errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(over_max_elements_across_tensors) {
  codec_limits limits;
  limits.max_elements = 50;
  push_request x = make_push({make_dense("a", {30}), make_dense("b", {30})});
  BOOST_TEST(fails_with(decode<push_request>(encode(x), limits), errc::message_too_large));
  x = make_push({make_dense("a", {30})});
  x.sparse = {sparse_rows{"e", 5, {1, 2, 3, 4, 5}, random_values(25, 2)}};  // 30 + 25 > 50
  BOOST_TEST(fails_with(decode<push_request>(encode(x), limits), errc::message_too_large));
  x = make_push({make_dense("a", {30})});
  x.signs = {sign_tensor{"s", {24}, 0, 1.0f, {0, 0, 0}}};  // 30 + 24 > 50
  BOOST_TEST(fails_with(decode<push_request>(encode(x), limits), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(over_max_tensors) {
  codec_limits limits;
  limits.max_tensors = 2;
  const push_request three =
      make_push({make_dense("a", {1}), make_dense("b", {1}), make_dense("c", {1})});
  BOOST_TEST(fails_with(decode<push_request>(encode(three), limits), errc::message_too_large));
  push_request mixed = make_push({make_dense("a", {1}), make_dense("b", {1})});
  mixed.signs = {sign_tensor{"s", {1}, 0, 1.0f, {1}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(mixed), limits), errc::message_too_large));
  const pull_reply reply{0, 0, {}, three.dense};
  BOOST_TEST(fails_with(decode<pull_reply>(encode(reply), limits), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(over_max_clock_entries) {
  codec_limits limits;
  limits.max_clock_entries = 4;
  bucket_stats x;
  x.clock = vector_clock{5};
  BOOST_TEST(fails_with(decode<bucket_stats>(encode(x), limits), errc::message_too_large));
  x.clock = vector_clock{4};
  BOOST_TEST(succeeded(decode<bucket_stats>(encode(x), limits)));
}

BOOST_AUTO_TEST_CASE(over_max_list) {
  codec_limits limits;
  limits.max_list = 3;
  BOOST_TEST(
      fails_with(decode<placement>(encode(make_placement(4, 1)), limits), errc::message_too_large));
  push_request x = make_push({});
  x.sparse = {sparse_rows{"e", 1, {1, 2, 3, 4}, {1, 2, 3, 4}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(x), limits), errc::message_too_large));
  BOOST_TEST(fails_with(decode<job_report>(encode(make_report(2)), limits),
                        errc::message_too_large));  // 2 lost workers + 2 epochs
}

BOOST_AUTO_TEST_CASE(too_many_dims) {
  const std::vector<uint32_t> nine(9, 1);
  BOOST_TEST(fails_with(decode<push_request>(encode(make_push({make_dense("w", nine)}))),
                        errc::message_too_large));
  const std::vector<uint32_t> eight(8, 1);
  BOOST_TEST(succeeded(decode<push_request>(encode(make_push({make_dense("w", eight)})))));
  push_request signs = make_push({});
  signs.signs = {sign_tensor{"s", nine, 0, 1.0f, {1}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(signs)), errc::message_too_large));
  placement p = make_placement(1, 1);
  p.buckets[0].slices[0].shape = nine;
  BOOST_TEST(fails_with(decode<placement>(encode(p)), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(too_long_tensor_name) {
  const std::string longest(256, 'n');
  BOOST_TEST(succeeded(decode<push_request>(encode(make_push({make_dense(longest, {1})})))));
  BOOST_TEST(fails_with(decode<push_request>(encode(make_push({make_dense(longest + "x", {1})}))),
                        errc::message_too_large));
  push_request sparse = make_push({});
  sparse.sparse = {sparse_rows{longest + "x", 1, {1}, {1.0f}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(sparse)), errc::message_too_large));
  push_request signs = make_push({});
  signs.signs = {sign_tensor{longest + "x", {1}, 0, 1.0f, {1}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(signs)), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(too_long_node_names) {
  const std::string name(257, 'n');
  BOOST_TEST(
      fails_with(decode<hello>(encode(hello{role::worker, name, {1}})), errc::message_too_large));
  BOOST_TEST(fails_with(decode<join_request>(encode(join_request{role::worker, name, 1})),
                        errc::message_too_large));
  BOOST_TEST(fails_with(decode<heartbeat>(encode(heartbeat{name, 1, 2})), errc::message_too_large));
  job_report r = make_report(1);
  r.workers_lost.push_back(name);
  BOOST_TEST(fails_with(decode<job_report>(encode(r)), errc::message_too_large));
  placement p = make_placement(1, 1);
  p.buckets[0].slices[0].tensor = name;
  BOOST_TEST(fails_with(decode<placement>(encode(p)), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(too_long_nonces_and_proofs) {
  const std::vector<uint8_t> too_long(65, 1);
  BOOST_TEST(fails_with(decode<hello>(encode(hello{role::worker, "w", too_long})),
                        errc::message_too_large));
  BOOST_TEST(
      fails_with(decode<challenge>(encode(challenge{1, too_long, {1}})), errc::message_too_large));
  BOOST_TEST(
      fails_with(decode<challenge>(encode(challenge{1, {1}, too_long})), errc::message_too_large));
  BOOST_TEST(fails_with(decode<proof>(encode(proof{1, too_long})), errc::message_too_large));
}

BOOST_AUTO_TEST_CASE(data_bytes_not_matching_shape) {
  BOOST_TEST(succeeded(decode<push_request>(raw_dense_push({2, 3}, schema::DType::F32, 24))));
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2, 3}, schema::DType::F32, 20)),
                        errc::shape_mismatch));
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2, 3}, schema::DType::F32, 28)),
                        errc::shape_mismatch));
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2, 3}, schema::DType::BF16, 24)),
                        errc::shape_mismatch));
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2, 3}, schema::DType::F16, 11)),
                        errc::shape_mismatch));
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({}, schema::DType::F32, 0)),
                        errc::shape_mismatch));
}

BOOST_AUTO_TEST_CASE(values_not_matching_shape_from_encoder) {
  // The encoder writes what it is given; the decoder catches the disagreement.
  const push_request x = make_push({dense_tensor{"w", {2, 2}, 0, {1, 2, 3}}});
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::shape_mismatch));
}

BOOST_AUTO_TEST_CASE(sparse_data_not_matching_rows) {
  capnp::MallocMessageBuilder message;
  auto push = message.initRoot<schema::PushRequest>();
  auto rows = push.initSparse(1)[0];
  rows.setName("emb");
  rows.setRowDim(3);
  auto ids = rows.initIds(2);
  ids.set(0, 4);
  ids.set(1, 8);
  rows.setDtype(schema::DType::F32);
  rows.initData(5 * sizeof(float));
  BOOST_TEST(fails_with(decode<push_request>(to_wire(message)), errc::shape_mismatch));
}

BOOST_AUTO_TEST_CASE(sign_bits_length_mismatch) {
  push_request x = make_push({});
  x.signs = {sign_tensor{"s", {10}, 0, 1.0f, {0xff}}};  // needs 2 bytes
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::shape_mismatch));
  x.signs = {sign_tensor{"s", {10}, 0, 1.0f, {0xff, 0x03, 0x00}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::shape_mismatch));
  x.signs = {sign_tensor{"s", {0}, 0, 1.0f, {0x00}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::shape_mismatch));
}

BOOST_AUTO_TEST_CASE(nan_in_push) {
  const push_request x = make_push({dense_tensor{"w", {3}, 0, {1.0f, nan_value, 2.0f}}});
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(positive_inf_in_push) {
  const push_request x = make_push({dense_tensor{"w", {3}, 0, {1.0f, 2.0f, inf_value}}});
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(negative_inf_in_push) {
  const push_request x = make_push({dense_tensor{"w", {1}, 0, {-inf_value}}});
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(non_finite_in_half_storage) {
  const push_request x = make_push({dense_tensor{"w", {2}, 0, {nan_value, 1.0f}}});
  BOOST_TEST(
      fails_with(decode<push_request>(encode(x, encode_options{dtype::bf16})), errc::non_finite));
  BOOST_TEST(
      fails_with(decode<push_request>(encode(x, encode_options{dtype::f16})), errc::non_finite));
  const push_request inf = make_push({dense_tensor{"w", {1}, 0, {-inf_value}}});
  BOOST_TEST(
      fails_with(decode<push_request>(encode(inf, encode_options{dtype::bf16})), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(non_finite_in_sparse_rows) {
  push_request x = make_push({});
  x.sparse = {sparse_rows{"emb", 2, {1}, {0.5f, inf_value}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(non_finite_sign_scale) {
  push_request x = make_push({});
  x.signs = {sign_tensor{"s", {8}, 0, nan_value, {0x0f}}};
  BOOST_TEST(fails_with(decode<push_request>(encode(x)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(non_finite_in_pull_reply_and_bucket_spec) {
  const dense_tensor bad{"w", {2}, 0, {inf_value, 0.0f}};
  BOOST_TEST(fails_with(decode<pull_reply>(encode(pull_reply{0, 0, {}, {bad}})), errc::non_finite));
  bucket_spec spec;
  spec.workers = 1;
  spec.tensors = {bad};
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(spec)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(non_finite_optimizer_hyper_parameter) {
  bucket_spec spec;
  spec.workers = 1;
  spec.optimizer.lr = nan_value;
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(spec)), errc::non_finite));
  spec.optimizer.lr = 1e-3f;
  spec.optimizer.weight_decay = inf_value;
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(spec)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(nan_allowed_without_require_finite) {
  codec_limits limits;
  limits.require_finite = false;
  push_request x = make_push({dense_tensor{"w", {3}, 0, {nan_value, inf_value, -inf_value}}});
  x.signs = {sign_tensor{"s", {1}, 0, nan_value, {1}}};
  auto y = decode<push_request>(encode(x), limits);
  BOOST_TEST_REQUIRE(succeeded(y));
  const auto& v = y->dense.at(0).values;
  BOOST_TEST(std::isnan(v.at(0)));
  BOOST_TEST((v.at(1) == inf_value));
  BOOST_TEST((v.at(2) == -inf_value));
  BOOST_TEST(std::isnan(y->signs.at(0).scale));
}

BOOST_AUTO_TEST_CASE(nan_allowed_without_require_finite_in_f16) {
  codec_limits limits;
  limits.require_finite = false;
  const push_request x = make_push({dense_tensor{"w", {1}, 0, {nan_value}}});
  auto y = decode<push_request>(encode(x, encode_options{dtype::f16}), limits);
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(std::isnan(y->dense.at(0).values.at(0)));
}

BOOST_AUTO_TEST_CASE(unknown_dtype) {
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2}, static_cast<schema::DType>(7), 8)),
                        errc::malformed_message));
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2}, static_cast<schema::DType>(4), 4)),
                        errc::malformed_message));
  // i8 (3) is known: 2 values take 2 bytes and a block's scale, not 4 bytes.
  BOOST_TEST(fails_with(decode<push_request>(raw_dense_push({2}, schema::DType::I8, 4)),
                        errc::shape_mismatch));
}

BOOST_AUTO_TEST_CASE(unknown_role) {
  capnp::MallocMessageBuilder hello_message;
  auto h = hello_message.initRoot<schema::Hello>();
  h.setRole(static_cast<schema::Role>(4));
  h.setName("n");
  BOOST_TEST(fails_with(decode<hello>(to_wire(hello_message)), errc::malformed_message));

  capnp::MallocMessageBuilder join_message;
  auto j = join_message.initRoot<schema::Join>();
  j.setRole(static_cast<schema::Role>(200));
  j.setName("n");
  BOOST_TEST(fails_with(decode<join_request>(to_wire(join_message)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(unknown_optimizer_kind) {
  capnp::MallocMessageBuilder message;
  auto spec = message.initRoot<schema::BucketSpec>();
  spec.setWorkers(1);
  spec.initOptimizer().setKind(static_cast<schema::Optimizer::Kind>(4));
  BOOST_TEST(fails_with(decode<bucket_spec>(to_wire(message)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(unknown_consistency_and_compensation) {
  capnp::MallocMessageBuilder message;
  auto spec = message.initRoot<schema::BucketSpec>();
  spec.setWorkers(1);
  spec.initConsistency().setMode(static_cast<schema::Consistency::Mode>(3));
  BOOST_TEST(fails_with(decode<bucket_spec>(to_wire(message)), errc::malformed_message));
  spec.initConsistency().setMode(schema::Consistency::Mode::SSP);
  spec.initCompensation().setKind(static_cast<schema::Compensation::Kind>(4));
  BOOST_TEST(fails_with(decode<bucket_spec>(to_wire(message)), errc::malformed_message));
  spec.initCompensation().setKind(schema::Compensation::Kind::DCASGD);
  spec.getCompensation().setLambda(-1.0f);
  BOOST_TEST(fails_with(decode<bucket_spec>(to_wire(message)), errc::non_finite));
}

BOOST_AUTO_TEST_CASE(bucket_spec_without_workers) {
  bucket_spec spec;
  spec.workers = 0;
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(spec)), errc::malformed_message));
  codec_limits limits;
  limits.max_clock_entries = 4;
  spec.workers = 5;
  BOOST_TEST(fails_with(decode<bucket_spec>(encode(spec), limits), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(start_job_bad_indices) {
  BOOST_TEST(
      fails_with(decode<start_job>(encode(start_job{0, 0, 1, 1, 0, {}})), errc::malformed_message));
  BOOST_TEST(
      fails_with(decode<start_job>(encode(start_job{2, 2, 1, 1, 0, {}})), errc::malformed_message));
  BOOST_TEST(
      fails_with(decode<start_job>(encode(start_job{0, 2, 1, 0, 0, {}})), errc::malformed_message));
}

BOOST_AUTO_TEST_SUITE_END()

// == messages larger than their repeated reads ==================================================
// Cap'n Proto charges every read of a pointer field against the traversal limit. These valid
// messages failed when decoders read a list or blob twice under a limit equal to the message
// size; they must round-trip.

BOOST_AUTO_TEST_SUITE(traversal_limit)

BOOST_AUTO_TEST_CASE(large_sign_tensor_round_trips) {
  push_request x = make_push({});
  x.signs = {sign_tensor{"s", {65536}, 0, 0.5f, std::vector<uint8_t>(8192, 0xa5)}};
  BOOST_TEST(succeeded(decode<push_request>(encode(x))));
}

BOOST_AUTO_TEST_CASE(job_report_of_20_epochs_round_trips) {
  BOOST_TEST(succeeded(decode<job_report>(encode(make_report(20)))));
}

BOOST_AUTO_TEST_CASE(placement_of_24_slices_round_trips) {
  const placement p = make_placement(8, 3);
  BOOST_TEST(succeeded(decode<placement>(encode(p))));
  BOOST_TEST(succeeded(decode<start_job>(encode(start_job{0, 1, 1, 1, 0, p}))));
}

BOOST_AUTO_TEST_CASE(pull_of_64_named_tensors_round_trips) {
  pull_reply x;
  for (int i = 0; i < 64; ++i)
    x.tensors.push_back(make_dense("layer" + std::to_string(i) + ".weight", {1}));
  BOOST_TEST(succeeded(decode<pull_reply>(encode(x))));
}

BOOST_AUTO_TEST_CASE(small_messages_of_each_kind_fit_the_limit) {
  // The same messages at the sizes the tests above use elsewhere decode fine.
  BOOST_TEST(succeeded(decode<job_report>(encode(make_report(12)))));
  BOOST_TEST(succeeded(decode<placement>(encode(make_placement(3, 3)))));
  push_request x = make_push({});
  x.signs = {sign_tensor{"s", {1024}, 0, 0.5f, std::vector<uint8_t>(128, 0xa5)}};
  BOOST_TEST(succeeded(decode<push_request>(encode(x))));
}

BOOST_AUTO_TEST_CASE(large_dense_tensor_round_trips) {
  // A dense payload is read once: large tensors are fine.
  const pull_reply x{0, 0, {}, {make_dense("w", {1000, 100})}};
  auto y = decode<pull_reply>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  check_dense(y->tensors.at(0), x.tensors[0]);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(console_tables_round_trip_and_ragged_rows_are_refused) {
  const table_view t{{"name", "steps"}, {{"worker-0", "12"}, {"worker-1", "-"}}};
  auto back = decode<table_view>(encode(t));
  BOOST_TEST_REQUIRE(static_cast<bool>(back));
  BOOST_TEST(back->columns == t.columns, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(back->rows.size() == 2u);
  BOOST_TEST(back->rows[1] == t.rows[1], boost::test_tools::per_element());
  const table_view ragged{{"a", "b"}, {{"only one"}}};
  BOOST_TEST(fails_with(decode<table_view>(encode(ragged)), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(heartbeats_carry_cpu_and_memory_and_refuse_nonsense) {
  heartbeat beat{"server-1", 7, 1234, 2.5, 1u << 20};
  beat.peak_rss_bytes = uint64_t{3} << 30;
  auto back = decode<heartbeat>(encode(beat));
  BOOST_TEST_REQUIRE(static_cast<bool>(back));
  BOOST_TEST(back->cpu_seconds == 2.5);
  BOOST_TEST(back->rss_bytes == (1u << 20));
  BOOST_TEST(back->peak_rss_bytes == (uint64_t{3} << 30));
  const heartbeat odd{"server-1", 8, 1235, -1.0, 0};
  BOOST_TEST(decode<heartbeat>(encode(odd))->cpu_seconds == 0.0);  // shown as 0, not trusted
}

// The tables' servers travel to a hybrid group's members as text: each one's CAF port, and its
// data lane's where it has one.
BOOST_AUTO_TEST_CASE(server_lists_round_trip_with_and_without_lanes) {
  const std::vector<endpoint> servers{{"10.0.0.1", 4242, 4243}, {"host-b", 5000, 0}};
  const auto text = to_server_list(servers);
  BOOST_TEST(text == "10.0.0.1:4242/4243,host-b:5000");
  auto back = parse_server_list(text);
  BOOST_TEST_REQUIRE(testing::succeeded(back));
  BOOST_TEST_REQUIRE(back->size() == 2u);
  BOOST_TEST((*back)[0].host == "10.0.0.1");
  BOOST_TEST((*back)[0].port == 4242);
  BOOST_TEST((*back)[0].lane == 4243);
  BOOST_TEST((*back)[1].host == "host-b");
  BOOST_TEST((*back)[1].lane == 0);
  BOOST_TEST(parse_server_list("")->empty());
  for (const char* bad : {"host", ":80", "h:0", "h:70000", "h:80/", "h:80/x", "h:80,,h:81"})
    BOOST_TEST(fails_with(parse_server_list(bad), errc::malformed_message), bad);
}

BOOST_AUTO_TEST_CASE(a_heartbeat_carries_its_members_activity) {
  heartbeat beat{"worker-7", 3, 4, 1.5, 1024};
  beat.activity.push_back(member_activity{"w0", "step 31", "user code: gradient", 12.5});
  auto y = decode<heartbeat>(encode(beat));
  BOOST_TEST_REQUIRE(bool(y));
  BOOST_TEST_REQUIRE(y->activity.size() == 1u);
  BOOST_TEST(y->activity[0].member == "w0");
  BOOST_TEST(y->activity[0].waiting_on == "user code: gradient");
  BOOST_TEST(y->activity[0].since_s == 12.5);
  beat.activity[0].since_s = std::numeric_limits<double>::quiet_NaN();  // read as 0, not NaN
  y = decode<heartbeat>(encode(beat));
  BOOST_TEST_REQUIRE(bool(y));
  BOOST_TEST(y->activity[0].since_s == 0.0);
  beat.activity[0].doing = std::string(257, 'd');
  BOOST_TEST(fails_with(decode<heartbeat>(encode(beat)), errc::message_too_large));
}
