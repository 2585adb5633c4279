// The pieces of a data-parallel group's sharded optimizer state (--zero-stage 1), and how the
// members of a new generation agree on them and cut them anew (agree_on_pieces, run on the
// allreduce_group's thread while the trainer waits). Each gradient bucket is cut into one
// contiguous piece per member (sharded_piece) and member r owns piece r of every bucket; with
// --shard-backups N it also holds the pieces of the N members before it around the ring,
// stepped alike every step, so that a member lost leaves its pieces with a survivor. A piece's
// values live in the parameters, which every member holds whole; a holder keeps its moments.
// For the dp_trainer and the allreduce_group only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <caf/expected.hpp>

#include "actors/dp/collective/collective.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/loop_group.hpp"  // sync_result
#include "troupe/values.hpp"

namespace troupe {

// Where one bucket's piece lies: in the model's flat values, and in its holder's moments.
struct shard_piece {
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t at = 0;
};

// The pieces of member `owner` of a cut, one per gradient bucket, and their moments (as many
// as the optimizer keeps), one piece after another.
struct held_pieces {
  uint32_t owner = 0;
  std::vector<shard_piece> pieces;
  uint64_t total = 0;
  std::vector<float> m, v;
};

// A generation's cut: `size` members, member `rank` holding its own pieces and the `backups`
// before it's (rank - 1, rank - 2, ... around the ring; at most size - 1 of them).
struct piece_cut {
  uint64_t generation = 0;  // 0: no cut (a member that joined)
  uint32_t size = 0;
  uint32_t rank = 0;
  uint32_t backups = 0;
};

// The owners whose pieces member `cut.rank` holds, its own first.
std::vector<uint32_t> held_owners(const piece_cut& cut);

// The pieces of `owner` in a cut of `size` over `buckets` (each a range of the flat values):
// where they lie, without moments (piece_ranges), or with their moments at zero (cut_pieces).
held_pieces piece_ranges(const std::vector<flat_range>& buckets, uint32_t size, uint32_t owner);
held_pieces cut_pieces(const std::vector<flat_range>& buckets, uint32_t size, uint32_t owner,
                       const optimizer_config& optimizer);
// Every owner's pieces that member `cut.rank` holds under `cut` (held_owners order), their
// moments at zero.
std::vector<held_pieces> cut_held(const std::vector<flat_range>& buckets, const piece_cut& cut,
                                  const optimizer_config& optimizer);

// Copies what lies in [offset, offset + from.size()) of the flat values, `from` (moment m, or v
// when `second`), into every piece of `into` that overlaps it; returns the values copied.
uint64_t copy_overlaps(uint64_t offset, std::span<const float> from, std::vector<held_pieces>& into,
                       bool second);

// A member's sharded state, and its side of an agreement (moved to the group's thread and back).
struct piece_exchange {
  piece_cut cut;                    // what `held` was cut by
  std::vector<held_pieces> held;    // held_owners(cut) order
  uint64_t at_step = 0;             // the last step the pieces took (applied or skipped)
  uint64_t version = 0;             // steps applied to them (Adam's bias correction)
  bool last_applied = false;        // whether step at_step was applied (not skipped)
  std::vector<float> last_buffers;  // the model's buffers after step at_step (member 0's)
  // Step at_step + 1 summed, but not known to be applied: each held owner's sums of it, in
  // held order, one after another (another member that applied it rolls this one forward).
  uint64_t summed_step = 0;
  std::vector<float> pending;
  // The model: its buckets and buffer tensors (ranges of the flat values), the optimizer.
  std::vector<flat_range> buckets;
  std::vector<flat_range> model_buffers;
  optimizer_config optimizer;
  // The parameters, whole; the agreement writes every piece's values into them.
  std::span<float> params;
  std::shared_ptr<void> params_owner;  // keeps them alive while the group writes
  piece_cut next;                      // the new generation's cut, for this member
};

// Where each held owner's sums begin in x.pending (x.held order); and the sums of holder
// `h`'s piece `p` there.
std::vector<uint64_t> pending_bases(const piece_exchange& x);
std::span<float> pending_sum(piece_exchange& x, const std::vector<uint64_t>& bases, size_t h,
                             const shard_piece& p);

// Steps every held piece by its sum (`sum_of` says where it is) at rate `x.optimizer.lr` as
// update x.version + 1, in place in the parameters: a member's step and a roll forward alike.
// bad_configuration for an optimizer that is not element-wise (nothing is stepped then).
using sum_source =
    std::function<std::span<const float>(const held_pieces& holder, const shard_piece& piece)>;
caf::error step_held(piece_exchange& x, const sum_source& sum_of);
// The same for the pieces of gradient bucket `bucket` only, as update `t` (x.version is left
// as it is): a member steps bucket by bucket while the buckets before are all-gathered.
void step_held_bucket(piece_exchange& x, uint64_t t, size_t bucket, const sum_source& sum_of);

// The members' agreement on one sharded state: the newest cut that a member holds, its pieces
// at the last step any member took (a member one step behind that holds that step's sums is
// rolled forward first), each piece's values and moments from its holder to every member, and
// `x.held` cut anew by `x.next`. When no member holds a cut (generation 1), member 0's
// parameters go to every member and the moments start at zero. errc::job_failed when a
// piece's every holder is gone (more members lost at once than --shard-backups covers).
caf::expected<std::shared_ptr<sync_result>> agree_on_pieces(collective& c, piece_exchange& x,
                                                            std::chrono::milliseconds timeout);

}  // namespace troupe
