// A dp member's state in the agreement after a generation forms (allreduce_group's
// state_pieces): its one-bucket store, moved in here for the agreement and taken back after it.
// As the source it sends the store's messages without its arrays (bucket_store::save_each with
// arrays apart) and then the arrays as they are. As a member that is behind, it checks the
// source's spec against its own model before it allocates anything and rebuilds the source's
// state with a bucket_restorer, the arrays broadcast straight into it: into its own store's
// memory when the configuration is the same (the usual case), else into a new store after
// dropping its own (it never holds two). Used by the dp_trainer only.
#pragma once

#include <optional>
#include <vector>

#include "actors/bucket/bucket_store.hpp"
#include "actors/dp/trainer/allreduce_group.hpp"

namespace troupe {

// Whether two stores' slices are alike: the same names, shapes and row offsets, in order
// (their values are not compared).
bool same_slices(const std::vector<dense_tensor>& a, const std::vector<dense_tensor>& b);

class store_pieces final : public state_pieces {
 public:
  // `own`: none when this member's state was lost in an earlier hand-over; `shapes`: the
  // slices (without values) of this member's model's store.
  store_pieces(std::optional<bucket_store> own, std::vector<dense_tensor> shapes,
               update_rules rules);

  caf::error each_message(
      const std::function<caf::error(std::span<const char>)>& put) const override;
  std::vector<std::span<const float>> arrays() const override;
  caf::error take(std::span<const char> message) override;
  caf::expected<std::vector<std::span<float>>> targets(const std::vector<uint64_t>& sizes) override;
  caf::error finish() override;
  bool spoiled() const override { return !own_ && !taken_; }

  // After the agreement: the store to go on with (this member's own, or the one it took);
  // none when it dropped its own and did not get another whole.
  std::optional<bucket_store> result() &&;

 private:
  caf::error check_spec(std::span<const char> message) const;

  std::optional<bucket_store> own_;
  std::vector<dense_tensor> shapes_;  // own_'s slices without their values
  update_rules rules_;
  std::optional<bucket_restorer> taking_;
  std::optional<bucket_store> taken_;
};

}  // namespace troupe
