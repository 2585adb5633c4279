// Sharded optimizer state in checkpoints (--zero-stage 1 and 2 with --checkpoint-dir). Each
// member saves its own pieces' moments as piece records, each saying where in the model's flat
// values it lies, which moment it holds and how many steps its pieces took (Adam's bias
// correction); the coordinator writes every member's records into the checkpoint as they come,
// all members at once. Since a record names flat values and not a member, a resumed member of
// any group size keeps, from every record, what overlaps the pieces its own cut gives it
// (piece_restorer). For the dp_trainer only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <caf/expected.hpp>

#include "actors/dp/trainer/piece_agreement.hpp"
#include "messages/codec.hpp"

namespace troupe {

// One record: values of moment `moment` (0: the first, 1: the second) from flat value
// `offset` on, after `version` applied steps.
struct piece_record {
  uint64_t version = 0;
  uint64_t offset = 0;
  uint32_t moment = 0;
  std::span<const float> values;  // into the wire it was decoded from
};

// The most values one record holds (8 MiB: parts stay well under the codec's cap).
inline constexpr uint64_t piece_record_values = uint64_t{1} << 21;

wire encode_piece_record(uint64_t version, uint64_t offset, uint32_t moment,
                         std::span<const float> values);
// errc::malformed_message when `w` is not a whole record.
caf::expected<piece_record> decode_piece_record(const wire& w);

// The records of `own` (a member's own pieces, after `version` steps), as functions that make
// each when called, in order: at least one (an empty record when the optimizer keeps no
// moments). `own` must not change until the last is made.
std::vector<std::function<wire()>> piece_save_plan(std::shared_ptr<const held_pieces> own,
                                                   uint64_t version);

// The pieces a resumed member holds, filled from a checkpoint's records.
struct restored_pieces {
  piece_cut cut;
  std::vector<held_pieces> held;  // held_owners(cut) order
  uint64_t version = 0;
};

// Fills the pieces of `cut` (their moments at zero, as cut_pieces made them) record by record,
// then checks that every value of every moment was filled exactly once.
class piece_restorer {
 public:
  piece_restorer(piece_cut cut, std::vector<held_pieces> held, unsigned moments);
  // errc::malformed_message, or corrupt_data for a record of another version or moment.
  caf::error add(const wire& record);
  // errc::corrupt_data when the records did not cover the pieces.
  caf::expected<restored_pieces> finish() &&;

 private:
  restored_pieces out_;
  unsigned moments_ = 0;
  bool versioned_ = false;
  uint64_t filled_ = 0;
};

}  // namespace troupe
