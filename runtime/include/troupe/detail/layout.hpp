// How a model's flat parameter vector is cut into buckets: each tensor is split into row
// ranges no larger than the per-bucket share and the pieces are spread so buckets hold about
// the same number of values. The coordinator computes the plan; workers and the evaluator use
// it to scatter and gather. Pure functions over value types.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <caf/error.hpp>

#include "messages/types.hpp"
#include "troupe/task.hpp"

namespace troupe {

// Offsets of each tensor of `specs` in the flat parameter vector.
struct flat_layout {
  std::vector<tensor_spec> specs;
  std::vector<uint64_t> offsets;  // offsets[i]: first value of specs[i]
  uint64_t total = 0;

  explicit flat_layout(std::vector<tensor_spec> tensors);

  // Index of the tensor called `name`, or -1.
  int find(const std::string& name) const;
};

// Values per row of a tensor of this shape (1 for a vector).
uint64_t row_size(const std::vector<uint32_t>& shape);

// Splits `layout` into `buckets` buckets placed round-robin on `servers` servers: each tensor
// in row ranges, or, when one row holds more than 2 Mi values, in flat pieces of at most 1 Mi
// values (slices of shape {n} whose row_offset counts values; a bucket treats them as vectors).
placement plan_buckets(const flat_layout& layout, uint32_t buckets, uint32_t servers);

// The values a bucket or a part aims at (4 MiB of f32). A plan of at least fewest_parts(total)
// buckets holds at most twice that plus one row in each (plan_buckets cuts pieces of at most
// the average and puts each on the emptiest bucket), so that each bucket's spec, pulls and
// pushes fit one message under the codec's 16 MiB cap, whatever the model's size.
constexpr uint64_t part_values = uint64_t{1} << 20;
uint32_t fewest_parts(uint64_t total_values);
// The most buckets a plan of `layout` fills, none empty: its tensors' rows, and for a tensor cut
// inside its rows its flat pieces of 1 Mi values.
uint64_t most_parts(const flat_layout& layout);

// `layout` cut into parts that each fit one message, whatever the model's size: about 1 Mi
// values each, at most 2 Mi plus one row (a dp member's parameters for evaluation). The same
// layout gives the same parts in every process.
placement message_parts(const flat_layout& layout);

// Where slice `s` lives in the flat vector: its first value and its number of values; nullopt
// when `s` is not a row range (or, for a tensor of rows over 2 Mi values, a flat piece) of one
// of the layout's tensors (unknown name, other trailing dimensions, rows past the end).
struct flat_range {
  uint64_t offset = 0;
  uint64_t count = 0;
};
std::optional<flat_range> locate(const flat_layout& layout, const slice& s);

// errc::shape_mismatch unless every slice of `plan` is a row range of `layout` and bucket i of
// the plan has id i. A worker checks the coordinator's plan against its own model with this.
caf::error validate_plan(const flat_layout& layout, const placement& plan);

// Copies the values of each slice of bucket `b` out of `flat` as dense tensors (a slice that
// locate() rejects comes back without values).
std::vector<dense_tensor> gather(const flat_layout& layout, const bucket_placement& b,
                                 std::span<const float> flat);

// The slices of bucket `b` as views into `flat`, nothing copied (what a push encodes from); a
// slice that locate() rejects comes back without values.
std::vector<dense_view> views(const flat_layout& layout, const bucket_placement& b,
                              std::span<const float> flat);

// Where tensor `t` (its name, shape and row offset) lives in `flat` when it is a row range
// inside one of the slices of `b`; an empty span otherwise. What a pull reply decodes into.
std::span<float> place_of(const flat_layout& layout, const bucket_placement& b,
                          const dense_tensor& t, std::span<float> flat);

// Writes `tensors` into `flat`; tensors that locate() rejects are skipped.
void scatter(const flat_layout& layout, const std::vector<dense_tensor>& tensors,
             std::span<float> flat);

// Embedding rows: which of `buckets` buckets holds row `id` of `table` (the same answer in
// every process), and a row's initial values, uniform in [-scale, scale] from
// (seed, table, id), so that whichever bucket creates a row creates the same one.
uint32_t row_bucket(const std::string& table, uint64_t id, uint32_t buckets);
void init_row(uint64_t seed, const std::string& table, uint64_t id, float scale,
              std::span<float> out);

// True when every tensor is a row range inside one of the slices of `b` (a selective-sync
// pull sends only the rows that changed).
bool within(const bucket_placement& b, const std::vector<dense_tensor>& tensors);

// True when `tensors` are exactly the slices of `b` (names, offsets, shapes, value counts).
bool matches(const bucket_placement& b, const std::vector<dense_tensor>& tensors);

}  // namespace troupe
