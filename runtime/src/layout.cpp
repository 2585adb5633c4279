#include "troupe/detail/layout.hpp"

#include <algorithm>
#include <cstring>

#include "troupe/error.hpp"
#include "troupe/random.hpp"

namespace troupe {

flat_layout::flat_layout(std::vector<tensor_spec> tensors) : specs(std::move(tensors)) {
  for (const auto& s : specs) {
    offsets.push_back(total);
    total += numel(s.shape);
  }
}

int flat_layout::find(const std::string& name) const {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return static_cast<int>(i);
  return -1;
}

uint64_t row_size(const std::vector<uint32_t>& shape) {
  uint64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

namespace {

uint32_t rows_of(const std::vector<uint32_t>& shape) {
  return shape.empty() ? 1 : shape[0];
}

std::vector<uint32_t> with_rows(std::vector<uint32_t> shape, uint32_t rows) {
  if (shape.empty()) return shape;
  shape[0] = rows;
  return shape;
}

// Whether a tensor of this shape is cut inside its rows: one row holds more than a bucket's
// message can carry. Such a tensor goes in flat pieces, slices of shape {n} whose row_offset
// counts values (locate reads them so); one of over 4 G values cannot be (row_offset is 32-bit).
bool cut_flat(const std::vector<uint32_t>& shape) {
  return shape.size() > 1 && row_size(shape) > 2 * part_values && numel(shape) <= UINT32_MAX;
}

// The pieces of tensor `spec`, each of at most `share` values: row ranges, or flat pieces of
// at most part_values (cut_flat).
void cut(const tensor_spec& spec, uint64_t share, std::vector<slice>& pieces) {
  if (cut_flat(spec.shape)) {
    const uint64_t total = numel(spec.shape), step = std::min(share, part_values);
    for (uint64_t at = 0; at < total; at += step)
      pieces.push_back(slice{spec.name,
                             static_cast<uint32_t>(at),
                             {static_cast<uint32_t>(std::min(step, total - at))}});
    return;
  }
  const uint64_t per_row = std::max<uint64_t>(1, row_size(spec.shape));
  const uint32_t rows = rows_of(spec.shape);
  const uint32_t rows_per_piece =
      static_cast<uint32_t>(std::clamp<uint64_t>(share / per_row, 1, std::max(rows, 1u)));
  for (uint32_t r = 0; r < rows; r += rows_per_piece) {
    const uint32_t n = std::min(rows_per_piece, rows - r);
    pieces.push_back(slice{spec.name, r, with_rows(spec.shape, n)});
  }
  if (rows == 0) pieces.push_back(slice{spec.name, 0, spec.shape});
}

}  // namespace

placement plan_buckets(const flat_layout& layout, uint32_t buckets, uint32_t servers) {
  buckets = std::max<uint32_t>(buckets, 1);
  servers = std::max<uint32_t>(servers, 1);
  const uint64_t share = std::max<uint64_t>(1, (layout.total + buckets - 1) / buckets);
  // Cut every tensor into pieces of at most `share` values (at least one row each, unless
  // its rows are too large for a message).
  std::vector<slice> pieces;
  for (const auto& spec : layout.specs) cut(spec, share, pieces);
  // Largest pieces first, each onto the bucket holding the fewest values so far.
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const slice& a, const slice& b) { return numel(a.shape) > numel(b.shape); });
  placement plan;
  std::vector<uint64_t> load(buckets, 0);
  for (uint32_t b = 0; b < buckets; ++b) plan.buckets.push_back({b, b % servers, {}});
  for (auto& piece : pieces) {
    const auto b = std::min_element(load.begin(), load.end()) - load.begin();
    load[b] += numel(piece.shape);
    plan.buckets[b].slices.push_back(std::move(piece));
  }
  return plan;
}

uint32_t fewest_parts(uint64_t total_values) {
  return static_cast<uint32_t>(
      std::max<uint64_t>(1, (total_values + part_values - 1) / part_values));
}

uint64_t most_parts(const flat_layout& layout) {
  uint64_t n = 0;
  for (const auto& spec : layout.specs)
    n += cut_flat(spec.shape) ? (numel(spec.shape) + part_values - 1) / part_values
                              : std::max<uint64_t>(rows_of(spec.shape), 1);
  return n;
}

placement message_parts(const flat_layout& layout) {
  return plan_buckets(layout, fewest_parts(layout.total), 1);
}

std::optional<flat_range> locate(const flat_layout& layout, const slice& s) {
  const int t = layout.find(s.tensor);
  if (t < 0) return std::nullopt;
  const auto& spec = layout.specs[t].shape;
  if (cut_flat(spec)) {  // a flat piece: {n} values from value row_offset on
    if (s.shape.size() != 1 || uint64_t{s.row_offset} + s.shape[0] > numel(spec))
      return std::nullopt;
    return flat_range{layout.offsets[t] + s.row_offset, s.shape[0]};
  }
  if (s.shape.size() != spec.size()) return std::nullopt;
  for (size_t d = 1; d < spec.size(); ++d)
    if (s.shape[d] != spec[d]) return std::nullopt;
  if (uint64_t{s.row_offset} + rows_of(s.shape) > rows_of(spec)) return std::nullopt;
  return flat_range{layout.offsets[t] + uint64_t{s.row_offset} * row_size(spec), numel(s.shape)};
}

caf::error validate_plan(const flat_layout& layout, const placement& plan) {
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    if (plan.buckets[b].bucket != b)
      return make_error(errc::shape_mismatch, "bucket " + std::to_string(b) + " has id " +
                                                  std::to_string(plan.buckets[b].bucket));
    for (const auto& s : plan.buckets[b].slices)
      if (!locate(layout, s))
        return make_error(errc::shape_mismatch, "bucket " + std::to_string(b) + " holds '" +
                                                    s.tensor + "' rows this model does not have");
  }
  return {};
}

std::vector<dense_tensor> gather(const flat_layout& layout, const bucket_placement& b,
                                 std::span<const float> flat) {
  std::vector<dense_tensor> out;
  out.reserve(b.slices.size());
  for (auto& v : views(layout, b, flat))
    out.push_back(dense_tensor{std::move(v.name), std::move(v.shape), v.row_offset,
                               std::vector<float>(v.values.begin(), v.values.end())});
  return out;
}

void scatter(const flat_layout& layout, const std::vector<dense_tensor>& tensors,
             std::span<float> flat) {
  for (const auto& t : tensors) {
    const auto r = locate(layout, slice{t.name, t.row_offset, t.shape});
    if (!r || r->count != t.values.size() || r->offset + r->count > flat.size()) continue;
    std::memcpy(flat.data() + r->offset, t.values.data(), r->count * sizeof(float));
  }
}

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

uint32_t row_bucket(const std::string& table, uint64_t id, uint32_t buckets) {
  return buckets ? static_cast<uint32_t>(splitmix64(id ^ fnv1a(table)) % buckets) : 0;
}

void init_row(uint64_t seed, const std::string& table, uint64_t id, float scale,
              std::span<float> out) {
  uint64_t state = splitmix64(seed ^ fnv1a(table)) ^ splitmix64(id);
  for (float& x : out) {
    state = splitmix64(state);
    const float unit = static_cast<float>(state >> 40) * 0x1p-24f;  // [0, 1)
    x = (2.0f * unit - 1.0f) * scale;
  }
}

namespace {

// True when the rows of `t` lie inside one of the slices of `b` (its values are not looked at).
bool rows_within(const bucket_placement& b, const dense_tensor& t) {
  const uint32_t rows = t.shape.empty() ? 1 : t.shape[0];
  for (const auto& s : b.slices) {
    const uint32_t slice_rows = s.shape.empty() ? 1 : s.shape[0];
    if (s.tensor != t.name || s.shape.size() != t.shape.size() ||
        !std::equal(s.shape.begin() + (s.shape.empty() ? 0 : 1), s.shape.end(),
                    t.shape.begin() + (t.shape.empty() ? 0 : 1)))
      continue;
    if (t.row_offset >= s.row_offset &&
        uint64_t{t.row_offset} + rows <= uint64_t{s.row_offset} + slice_rows)
      return true;
  }
  return false;
}

}  // namespace

bool within(const bucket_placement& b, const std::vector<dense_tensor>& tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [&](const dense_tensor& t) {
    return rows_within(b, t) && numel(t.shape) == t.values.size();
  });
}

std::vector<dense_view> views(const flat_layout& layout, const bucket_placement& b,
                              std::span<const float> flat) {
  std::vector<dense_view> out;
  out.reserve(b.slices.size());
  for (const auto& s : b.slices) {
    dense_view v{s.tensor, s.shape, s.row_offset, {}};
    if (const auto r = locate(layout, s); r && r->offset + r->count <= flat.size())
      v.values = flat.subspan(r->offset, r->count);
    out.push_back(std::move(v));
  }
  return out;
}

std::span<float> place_of(const flat_layout& layout, const bucket_placement& b,
                          const dense_tensor& t, std::span<float> flat) {
  if (!rows_within(b, t)) return {};
  const auto r = locate(layout, slice{t.name, t.row_offset, t.shape});
  if (!r || r->offset + r->count > flat.size()) return {};
  return flat.subspan(r->offset, r->count);
}

bool matches(const bucket_placement& b, const std::vector<dense_tensor>& tensors) {
  if (b.slices.size() != tensors.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& s = b.slices[i];
    const auto& t = tensors[i];
    if (s.tensor != t.name || s.row_offset != t.row_offset || s.shape != t.shape ||
        numel(s.shape) != t.values.size())
      return false;
  }
  return true;
}

}  // namespace troupe
