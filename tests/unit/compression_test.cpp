// DP2 compression: the wire codecs (bf16, fp16 with its scale, 1-bit with error feedback),
// the two-phase compressed sum over Gloo with both error feedbacks, the bytes it sends, the
// schedules of 1-bit and 0/1 Adam, and their Adam arithmetic (the warmup is Adam; a 0/1
// synchronisation of one member lands where its local steps did).
#define BOOST_TEST_MODULE compression
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>

#include "actors/dp/collective/gloo_collective.hpp"
#include "actors/dp/compression/adam_replica.hpp"
#include "actors/dp/compression/compressed_adam.hpp"
#include "actors/dp/compression/compressed_allreduce.hpp"
#include "collective_ranks.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "kernels/cpu/wire_codec.hpp"

using namespace troupe;
using kernels::wire_codec;

using troupe::testing::ignore_sigpipe;
BOOST_TEST_GLOBAL_FIXTURE(ignore_sigpipe);

namespace {

std::vector<float> ramp(size_t n, float scale, uint32_t seed = 0) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = scale * std::sin(0.37f * float(i) + float(seed));
  return out;
}

std::vector<float> round_trip(wire_codec c, const std::vector<float>& in,
                              std::vector<float>* residual = nullptr) {
  std::vector<float> words(kernels::codec_words(c, in.size())), out(in.size());
  kernels::encode_values(c, in, residual ? std::span<float>(*residual) : std::span<float>{}, words);
  kernels::decode_values(c, words, out);
  return out;
}

std::vector<std::string> run_gloo(uint32_t size, const testing::rank_body& body) {
  return testing::run_ranks(
      size,
      [](rendezvous_store& store, uint32_t r, uint32_t n) {
        return make_gloo_collective(
            store, gloo_options{r, n, "127.0.0.1", "c/", std::chrono::seconds(20)});
      },
      body);
}

}  // namespace

BOOST_AUTO_TEST_CASE(sixteen_bit_codecs_round_within_their_precision_and_fp16_never_overflows) {
  const auto small = ramp(1001, 0.01f), huge = ramp(1001, 3e6f);
  for (const auto& in : {small, huge}) {
    const auto bf16 = round_trip(wire_codec::bf16, in);
    const auto fp16 = round_trip(wire_codec::fp16, in);
    float largest = 0;
    for (float x : in) largest = std::max(largest, std::abs(x));
    for (size_t i = 0; i < in.size(); ++i) {
      BOOST_TEST_REQUIRE(std::abs(bf16[i] - in[i]) <= std::abs(in[i]) / 256 + 1e-30f);
      BOOST_TEST_REQUIRE(std::isfinite(fp16[i]));  // 3e6 is far past fp16's 65504
      BOOST_TEST_REQUIRE(std::abs(fp16[i] - in[i]) <= largest / 1024);
    }
  }
  BOOST_TEST(kernels::codec_words(wire_codec::bf16, 1001) == 501u);
  BOOST_TEST(kernels::codec_words(wire_codec::fp16, 1001) == 502u);
  BOOST_TEST(kernels::codec_words(wire_codec::onebit, 1001) == 4u + 32u);  // 4 scales
}

BOOST_AUTO_TEST_CASE(one_bit_keeps_what_it_lost_and_sends_it_later) {
  const auto in = ramp(500, 1.0f);
  std::vector<float> residual(in.size(), 0.0f), sent_sum(in.size(), 0.0f);
  const auto first = round_trip(wire_codec::onebit, in, &residual);
  for (size_t i = 0; i < in.size(); ++i) {
    BOOST_TEST_REQUIRE(std::abs(first[i]) == std::abs(first[i / 256 * 256]));  // +-its scale
    BOOST_TEST_REQUIRE(std::abs(residual[i] - (in[i] - first[i])) <= 1e-6f);   // e = p - q
    sent_sum[i] = first[i];
  }
  constexpr int rounds = 400;
  for (int k = 1; k < rounds; ++k) {
    const auto sent = round_trip(wire_codec::onebit, in, &residual);
    for (size_t i = 0; i < in.size(); ++i) sent_sum[i] += sent[i];
  }
  // Error feedback: what was sent over the rounds is what came in, up to the last error.
  for (size_t i = 0; i < in.size(); ++i)
    BOOST_TEST_REQUIRE(std::abs(sent_sum[i] / rounds - in[i]) <= 0.02f);
}

BOOST_AUTO_TEST_CASE(a_compressed_sum_gives_every_member_the_same_bits_near_the_true_sum) {
  for (uint32_t size : {1u, 2u, 3u, 4u})
    for (auto codec : {wire_codec::bf16, wire_codec::fp16, wire_codec::onebit}) {
      BOOST_TEST_CONTEXT(size << " members, " << kernels::to_string(codec)) {
        constexpr size_t n = 1003;  // not a multiple of the members
        constexpr int rounds = 300;
        const bool onebit = codec == wire_codec::onebit;
        std::vector<std::vector<float>> last(size), mean(size, std::vector<float>(n, 0.0f));
        auto failures = run_gloo(size, [&](collective& g, uint32_t r) {
          std::vector<float> worker(n, 0.0f), server(compressed_chunk(n, size), 0.0f), scratch;
          for (int k = 0; k < (onebit ? rounds : 1); ++k) {
            auto data = ramp(n, 1.0f, r);
            auto done = compressed_allreduce(
                g, data, codec, {worker, server},
                collective_call{uint32_t(k + 1), std::chrono::seconds(20)}, {}, scratch);
            if (!done) return;
            BOOST_CHECK_EQUAL(done->bytes, compressed_sum_bytes(codec, n, size));
            for (size_t i = 0; i < n; ++i) mean[r][i] += data[i];
            last[r] = data;
          }
        });
        BOOST_TEST_REQUIRE(failures.empty());
        for (uint32_t r = 0; r < size; ++r) {
          BOOST_TEST_REQUIRE((last[r] == last[0]));  // the same bits on every member
          for (size_t i = 0; i < n; ++i) {
            float want = 0;
            for (uint32_t j = 0; j < size; ++j) want += ramp(n, 1.0f, j)[i];
            const float got = mean[r][i] / float(onebit ? rounds : 1);
            // 16 bits: two roundings; 1 bit: both error feedbacks make the mean converge.
            BOOST_TEST_REQUIRE(std::abs(got - want) <= (onebit ? 0.05f : 0.01f) * float(size),
                               i << ": " << got << " vs " << want);
          }
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(one_bit_sends_over_twenty_times_fewer_bytes_than_fp32) {
  for (uint32_t size : {2u, 4u, 8u}) {
    const size_t n = 100000;
    const double fp32 = 2.0 * (size - 1) / size * n * 4;
    BOOST_TEST(fp32 / double(compressed_sum_bytes(wire_codec::onebit, n, size)) >= 20);
    BOOST_TEST(fp32 / double(compressed_sum_bytes(wire_codec::bf16, n, size)) >= 1.99);
  }
}

BOOST_AUTO_TEST_CASE(zero_one_schedules_double_their_intervals) {
  std::vector<uint64_t> refreshes;
  for (uint64_t s = 1; s <= 40; ++s)
    if (variance_refresh(s, 2)) refreshes.push_back(s);
  BOOST_TEST((refreshes == std::vector<uint64_t>{1, 2, 4, 6, 8, 12, 16, 24, 32}));
  dp_compression c;
  c.adam = compressed_adam::zero_one;
  c.var_update_scaler = 2;
  for (uint64_t freeze : {1u, 5u, 30u, 40u}) {
    c.var_freeze_step = freeze;
    uint64_t count = 0;
    for (uint64_t s = 1; s <= freeze; ++s) count += variance_refresh(s, 2);
    BOOST_TEST(variance_refreshes(c, 1000) == count);
  }
  c.var_freeze_step = 100;
  c.local_step_scaler = 10;
  c.local_step_clipper = 4;
  BOOST_TEST(local_interval(c, 101) == 1u);
  BOOST_TEST(local_interval(c, 110) == 1u);
  BOOST_TEST(local_interval(c, 111) == 2u);
  BOOST_TEST(local_interval(c, 121) == 4u);
  BOOST_TEST(local_interval(c, 500) == 4u);
  BOOST_TEST((stage_of(c, 24, false) == adam_stage::full));
  BOOST_TEST((stage_of(c, 25, false) == adam_stage::momentum));
  BOOST_TEST((stage_of(c, 101, false) == adam_stage::sync));
  BOOST_TEST((stage_of(c, 121, false) == adam_stage::local));
  BOOST_TEST((stage_of(c, 124, false) == adam_stage::sync));
  BOOST_TEST((stage_of(c, 123, true) == adam_stage::sync));  // an epoch's last step
  c.adam = compressed_adam::onebit;
  c.freeze_step = 7;
  BOOST_TEST((stage_of(c, 7, false) == adam_stage::full));
  BOOST_TEST((stage_of(c, 8, false) == adam_stage::momentum));
}

namespace {

struct one_tensor {
  flat_layout layout{{tensor_spec{"w", {64}}}};
  optimizer_config o;
  bucket_store store;
  explicit one_tensor(const std::vector<float>& theta)
      : store(bucket_spec{0, 1, o, {dense_tensor{"w", {64}, 0, theta}}}) {}
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_full_precision_stage_is_adam) {
  const auto theta0 = ramp(64, 0.5f);
  one_tensor a(theta0);
  dp_compression c;
  c.adam = compressed_adam::onebit;
  c.freeze_step = 100;
  adam_replica adam(a.layout, plan_buckets(a.layout, 1, 1).buckets[0], c, a.o);
  std::vector<float> theta = theta0, m(64, 0.0f), v(64, 0.0f);
  for (uint64_t t = 1; t <= 5; ++t) {
    const auto g = ramp(64, 0.1f, uint32_t(t));
    BOOST_TEST_REQUIRE(!adam.apply(adam_stage::full, t, g, a.store));
    kernels::adam_step(theta, m, v, g, {a.o.lr, a.o.beta1, a.o.beta2, a.o.epsilon, 0.0f, t});
  }
  const auto got = a.store.adam_state(0).values;
  for (size_t i = 0; i < 64; ++i) BOOST_TEST_REQUIRE(std::abs(got[i] - theta[i]) <= 1e-6f);
  std::vector<float> bad(64, 0.0f);
  bad[3] = std::nanf("");
  BOOST_TEST(bool(adam.apply(adam_stage::full, 6, bad, a.store)));  // refused, nothing changed
  for (size_t i = 0; i < 64; ++i) BOOST_TEST_REQUIRE(std::isfinite(got[i]));
}

BOOST_AUTO_TEST_CASE(a_synchronisation_of_one_member_lands_where_its_local_steps_did) {
  one_tensor a(ramp(64, 0.5f));
  dp_compression c;
  c.adam = compressed_adam::zero_one;
  c.var_freeze_step = 3;
  adam_replica adam(a.layout, plan_buckets(a.layout, 1, 1).buckets[0], c, a.o);
  for (uint64_t t = 1; t <= 3; ++t)
    BOOST_TEST_REQUIRE(!adam.apply(adam_stage::full, t, ramp(64, 0.1f, uint32_t(t)), a.store));
  adam.restart(a.store);
  const auto anchor =
      std::vector<float>(a.store.adam_state(0).values.begin(), a.store.adam_state(0).values.end());
  for (uint64_t t = 4; t <= 7; ++t)
    BOOST_TEST_REQUIRE(!adam.local_step(t, ramp(64, 0.1f, uint32_t(t)), a.store, true));
  const auto state = a.store.adam_state(0);
  const std::vector<float> local(state.values.begin(), state.values.end());
  std::vector<float> mean(64);
  adam.accumulated(mean, 1.0f);
  BOOST_TEST_REQUIRE(!adam.adopt(7, mean, a.store));
  for (size_t i = 0; i < 64; ++i) {
    BOOST_TEST_REQUIRE(std::abs(state.values[i] - local[i]) <= 1e-6f);
    BOOST_TEST_REQUIRE(local[i] != anchor[i]);  // the local steps moved it
  }
}

BOOST_AUTO_TEST_CASE(a_sync_steps_own_local_step_only_accumulates_and_a_bad_mean_goes_back) {
  one_tensor a(ramp(64, 0.5f));
  dp_compression c;
  c.adam = compressed_adam::zero_one;
  c.var_freeze_step = 1;
  adam_replica adam(a.layout, plan_buckets(a.layout, 1, 1).buckets[0], c, a.o);
  BOOST_TEST_REQUIRE(!adam.apply(adam_stage::full, 1, ramp(64, 0.1f, 1), a.store));
  adam.restart(a.store);
  const auto state = a.store.adam_state(0);
  const std::vector<float> theta(state.values.begin(), state.values.end());
  const std::vector<float> m(state.m.begin(), state.m.end());
  BOOST_TEST_REQUIRE(!adam.local_step(2, ramp(64, 0.1f, 2), a.store, false));
  BOOST_TEST((std::vector<float>(state.values.begin(), state.values.end()) == theta));
  BOOST_TEST((std::vector<float>(state.m.begin(), state.m.end()) == m));
  std::vector<float> mean(64);
  adam.accumulated(mean, 1.0f);
  BOOST_TEST(std::any_of(mean.begin(), mean.end(), [](float x) { return x != 0; }));
  mean[5] = std::nanf("");
  BOOST_TEST(bool(adam.adopt(2, mean, a.store)));  // refused: back to the anchor, no momentum
  BOOST_TEST((std::vector<float>(state.values.begin(), state.values.end()) == theta));
  BOOST_TEST(std::all_of(state.m.begin(), state.m.end(), [](float x) { return x == 0; }));
}
