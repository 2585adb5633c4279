// The codec's copy-saving paths: large tensors referenced where they are when encoding (their
// own segments, at most max_referenced per message), pull replies left unwritten until a lane
// writes them, pushes encoded from views of a gradient, and pull replies decoded straight into
// the reader's memory. Each must give the same bytes or
// values as the plain path, and refuse what the plain path refuses.
#include <fmt/format.h>
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "expect_error.hpp"
#include "messages/codec.hpp"
#include "messages/codec_detail.hpp"
#include "random_values.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::succeeded;
namespace tt = boost::test_tools;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  return troupe::testing::random_values(n, seed, 1.0f);
}

// 64 KiB and up, whole words: referenced; the odd one is copied.
std::vector<dense_tensor> big_tensors(size_t count) {
  std::vector<dense_tensor> out;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t rows = 64 + static_cast<uint32_t>(i % 3);
    out.push_back(dense_tensor{fmt::format("t{}", i),
                               {rows, 256},
                               0,
                               random_values(size_t{rows} * 256, static_cast<uint32_t>(i))});
  }
  out.push_back(dense_tensor{"odd", {16385}, 0, random_values(16385, 99)});
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(referenced_tensors_round_trip_bit_exact) {
  BOOST_TEST(detail::referenceable(std::vector<float>(16384), dtype::f32));
  BOOST_TEST(!detail::referenceable(std::vector<float>(16385), dtype::f32));  // not whole words
  BOOST_TEST(!detail::referenceable(std::vector<float>(16384), dtype::bf16));
  BOOST_TEST(!detail::referenceable(std::vector<float>(100), dtype::f32));  // too small
  pull_reply x;
  x.bucket = 3;
  x.version = 17;
  x.tensors = big_tensors(detail::max_referenced + 5);  // more than one message references
  auto y = decode<pull_reply>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST_REQUIRE(y->tensors.size() == x.tensors.size());
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    BOOST_TEST(y->tensors[i].name == x.tensors[i].name);
    BOOST_TEST(y->tensors[i].values == x.tensors[i].values, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE(an_unwritten_reply_is_the_encoded_reply) {
  pull_reply x;
  x.bucket = 5;
  x.version = 2;
  x.clock = vector_clock{std::vector<uint64_t>{3, 4}};
  x.rows.push_back(sparse_rows{"emb", 4, {7}, random_values(4, 5)});
  const auto tensors = big_tensors(3);
  const auto plain = encode(x, tensors);
  const auto unwritten = encode_unwritten(x, tensors);
  BOOST_TEST(unwritten->size() == plain.bytes.size());
  size_t calls = 0, total = 0;
  wire_bytes joined;
  unwritten->write_to([&](byte_parts parts) {
    ++calls;
    for (const auto& part : parts) {
      total += part.size();
      joined.insert(joined.end(), part.begin(), part.end());
    }
  });
  BOOST_TEST(calls == 1u);  // every part at once, as a ring or a gathering write takes them
  BOOST_TEST(total == plain.bytes.size());
  BOOST_TEST(joined == plain.bytes, tt::per_element());
  BOOST_TEST(unwritten->gathered() == plain.bytes, tt::per_element());
  // A wire that leaves the process carries the gathered bytes.
  wire w;
  w.unwritten = unwritten;
  const auto out = encoded(w);
  BOOST_TEST(out.bytes == plain.bytes, tt::per_element());
  auto y = decode<pull_reply>(out);
  BOOST_TEST_REQUIRE(succeeded(y));
  BOOST_TEST(y->tensors[1].values == tensors[1].values, tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_push_from_views_is_the_push_from_copies) {
  const auto grad = random_values(3 * 256 * 64, 5);
  push_request x{1, 0, 4, vector_clock{std::vector<uint64_t>{4, 2}}};
  std::vector<dense_view> views;
  for (uint32_t i = 0; i < 3; ++i) {
    const std::span<const float> part{grad.data() + i * 256 * 64, 256 * 64};
    views.push_back(dense_view{"w" + std::to_string(i), {64, 256}, 64 * i, part});
    x.dense.push_back(dense_tensor{
        "w" + std::to_string(i), {64, 256}, 64 * i, std::vector<float>(part.begin(), part.end())});
  }
  auto from_views = decode<push_request>(encode(x, views));
  auto from_copies = decode<push_request>(encode(x));
  BOOST_TEST_REQUIRE(succeeded(from_views));
  BOOST_TEST_REQUIRE(succeeded(from_copies));
  BOOST_TEST_REQUIRE(from_views->dense.size() == 3u);
  for (size_t i = 0; i < 3; ++i) {
    BOOST_TEST(from_views->dense[i].row_offset == x.dense[i].row_offset);
    BOOST_TEST(from_views->dense[i].values == from_copies->dense[i].values, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE(a_pull_reply_decodes_into_place) {
  pull_reply x;
  x.bucket = 1;
  x.clock = vector_clock{std::vector<uint64_t>{3, 1}};
  x.tensors = {dense_tensor{"a", {2, 3}, 1, random_values(6, 1)},
               dense_tensor{"b", {70000}, 0, random_values(70000, 2)}};
  std::vector<float> a(9, 0.0f), b(70000, 0.0f);  // "a" has three rows; the reply holds 1..2
  auto place = [&](const dense_tensor& t) -> std::span<float> {
    if (t.name == "a" && t.shape == std::vector<uint32_t>{2, 3} && t.row_offset == 1)
      return {a.data() + 3, 6};
    if (t.name == "b" && t.shape == std::vector<uint32_t>{70000}) return b;
    return {};
  };
  for (const wire& w : {encode(x), local_wire(x)}) {
    std::fill(a.begin(), a.end(), 0.0f);
    auto y = decode_pull_into(w, place);
    BOOST_TEST_REQUIRE(succeeded(y));
    BOOST_TEST(y->bucket == 1u);
    BOOST_TEST(y->clock.size() == 2u);
    BOOST_TEST(y->clock.at(0) == 3u);
    BOOST_TEST_REQUIRE(y->tensors.size() == 2u);
    BOOST_TEST(y->tensors[0].values.empty());  // headers only: the values went into place
    BOOST_TEST(std::vector<float>(a.begin() + 3, a.end()) == x.tensors[0].values,
               tt::per_element());
    BOOST_TEST(std::vector<float>(a.begin(), a.begin() + 3) == std::vector<float>(3, 0.0f),
               tt::per_element());
    BOOST_TEST(b == x.tensors[1].values, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE(a_pull_reply_into_place_refuses_what_decode_refuses) {
  pull_reply x;
  x.tensors = {dense_tensor{"a", {4}, 0, {1, 2, 3, 4}}};
  std::vector<float> room(4, 0.0f);
  auto place = [&](const dense_tensor& t) -> std::span<float> {
    return t.name == "a" ? std::span<float>{room} : std::span<float>{};
  };
  x.tensors[0].name = "elsewhere";  // a tensor the reader does not keep
  BOOST_TEST(fails_with(decode_pull_into(encode(x), place), errc::shape_mismatch));
  BOOST_TEST(fails_with(decode_pull_into(local_wire(x), place), errc::shape_mismatch));
  x.tensors[0].name = "a";
  x.tensors[0].values[2] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(fails_with(decode_pull_into(encode(x), place), errc::non_finite));
  BOOST_TEST(fails_with(decode_pull_into(wire{{'n', 'o', 'p', 'e'}, nullptr}, place),
                        errc::malformed_message));
  BOOST_TEST(fails_with(decode_pull_into(local_wire(push_ack{}), place), errc::malformed_message));
}

BOOST_AUTO_TEST_CASE(a_push_decodes_in_place_as_decode_reads_it) {
  push_request x{1, 0, 4, vector_clock{std::vector<uint64_t>{4, 2}}};
  x.dense.push_back(dense_tensor{"big", {64, 256}, 0, random_values(64 * 256, 7)});
  x.dense.push_back(dense_tensor{"small", {3}, 2, {0.5f, -0.25f, 1.0f}});
  const wire w = encode(x);
  std::vector<std::span<const float>> views;
  auto in_place = decode_push_in_place(w, {}, views);
  BOOST_TEST_REQUIRE(succeeded(in_place));
  BOOST_TEST_REQUIRE(views.size() == 2u);
  const auto* first = w.bytes.data();
  for (size_t i = 0; i < 2; ++i) {
    const auto* p = reinterpret_cast<const char*>(views[i].data());
    BOOST_TEST((p >= first && p + views[i].size_bytes() <= first + w.bytes.size()));  // in w
    BOOST_TEST(in_place->dense[i].values.empty());
    BOOST_TEST(in_place->dense[i].name == x.dense[i].name);
    BOOST_TEST(in_place->dense[i].row_offset == x.dense[i].row_offset);
    BOOST_TEST(std::vector<float>(views[i].begin(), views[i].end()) == x.dense[i].values,
               tt::per_element());
  }
  BOOST_TEST(in_place->read_clock.entries() == x.read_clock.entries(), tt::per_element());

  // bf16 values and a local wire's are copied; the views then span the push's own values.
  for (const wire& copied : {encode(x, encode_options{dtype::bf16}), local_wire(x)}) {
    auto decoded = decode_push_in_place(copied, {}, views);
    BOOST_TEST_REQUIRE(succeeded(decoded));
    BOOST_TEST_REQUIRE(views.size() == 2u);
    for (size_t i = 0; i < 2; ++i) {
      BOOST_TEST(views[i].data() == decoded->dense[i].values.data());
      BOOST_TEST(views[i].size() == x.dense[i].values.size());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_push_in_place_refuses_what_decode_refuses) {
  push_request x{1, 0, 4, vector_clock{}};
  x.dense.push_back(dense_tensor{"g", {64, 256}, 0, random_values(64 * 256, 8)});
  std::vector<std::span<const float>> views;
  x.dense[0].values[100] = std::numeric_limits<float>::infinity();
  BOOST_TEST(fails_with(decode_push_in_place(encode(x), {}, views), errc::non_finite));
  x.dense[0].values[100] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(fails_with(decode_push_in_place(encode(x), {}, views), errc::non_finite));
  x.dense[0].values[100] = 0.0f;
  codec_limits few;
  few.max_elements = 1000;  // a bucket's cap: its own number of values
  BOOST_TEST(fails_with(decode_push_in_place(encode(x), few, views), errc::message_too_large));
  BOOST_TEST(fails_with(decode_push_in_place(wire{{'n', 'o', 'p', 'e'}, nullptr}, {}, views),
                        errc::malformed_message));
}
