#include "actors/dp/trainer/store_pieces.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "troupe/error.hpp"

namespace troupe {

bool same_slices(const std::vector<dense_tensor>& a, const std::vector<dense_tensor>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.name == y.name && x.shape == y.shape && x.row_offset == y.row_offset;
  });
}

store_pieces::store_pieces(std::optional<bucket_store> own, std::vector<dense_tensor> shapes,
                           update_rules rules)
    : own_(std::move(own)), shapes_(std::move(shapes)), rules_(std::move(rules)) {}

caf::error store_pieces::each_message(
    const std::function<caf::error(std::span<const char>)>& put) const {
  if (!own_) return make_error(errc::job_failed, "this member holds no state to send");
  return own_->save_each([&](wire w) { return put(w.bytes); }, true);
}

std::vector<std::span<const float>> store_pieces::arrays() const {
  return own_ ? own_->arrays() : std::vector<std::span<const float>>{};
}

// The source's spec must be of this member's model (the same slices, names and shapes), so
// that what it makes this member allocate is what its own state held.
caf::error store_pieces::check_spec(std::span<const char> message) const {
  auto spec = decode<bucket_spec>(wire{wire_bytes(message.begin(), message.end())});
  if (!spec) return std::move(spec.error());
  const auto& theirs = spec->tensors;
  if (!spec->values_follow || !same_slices(theirs, shapes_))
    return make_error(errc::shape_mismatch,
                      fmt::format("the agreed state is of another model ({} slices, this member "
                                  "{})",
                                  theirs.size(), shapes_.size()));
  return {};
}

caf::error store_pieces::take(std::span<const char> message) {
  if (!taking_) {  // the first message: the source's spec
    if (auto err = check_spec(message)) return err;
    const wire spec{wire_bytes(message.begin(), message.end())};
    // Ours has the same configuration (the same job): its memory takes the source's state in
    // place. Otherwise ours gives way before the source's is allocated.
    caf::expected<bucket_restorer> begun = caf::error{};
    if (own_ && own_->saved_spec().bytes == spec.bytes) {
      begun = bucket_restorer::over(std::move(*own_), spec, true);
      own_.reset();
    } else {
      own_.reset();
      begun = bucket_restorer::begin(spec, rules_, true);
    }
    if (!begun) return std::move(begun.error());
    taking_.emplace(std::move(*begun));
    return {};
  }
  return taking_->add(wire{wire_bytes(message.begin(), message.end())});
}

caf::expected<std::vector<std::span<float>>> store_pieces::targets(
    const std::vector<uint64_t>& sizes) {
  if (!taking_) return make_error(errc::malformed_message, "the agreed state came without a spec");
  auto mine = taking_->arrays();
  bool same = mine.size() == sizes.size();
  for (size_t i = 0; same && i < sizes.size(); ++i) same = mine[i].size() == sizes[i];
  if (!same)
    return make_error(errc::shape_mismatch,
                      fmt::format("the agreed state has {} arrays of other sizes than the {} "
                                  "this member keeps",
                                  sizes.size(), mine.size()));
  return mine;
}

caf::error store_pieces::finish() {
  if (!taking_) return make_error(errc::malformed_message, "the agreed state came without a spec");
  auto done = taking_->finish();
  taking_.reset();
  if (!done) return std::move(done.error());
  taken_.emplace(std::move(*done));
  return {};
}

std::optional<bucket_store> store_pieces::result() && {
  if (taken_) return std::move(taken_);
  return std::move(own_);
}

}  // namespace troupe
