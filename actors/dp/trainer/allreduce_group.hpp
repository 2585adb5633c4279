// allreduce_group: a data-parallel worker's membership in its group and its collective
// backend. The trainer forms it for one generation (rank, size, the coordinator's rendezvous
// store, the backend) and then hands it gradient buckets to sum over the members, one
// request per bucket, answered in the order sent. It runs the backend's blocking calls on a
// thread of its own (spawn it detached), so the CAF scheduler threads stay free, and the
// trainer's backward can go on while a bucket is reduced. Local only: its messages carry
// pointers into the trainer's buffers and never cross a process boundary.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/dp/collective/collective.hpp"
#include "actors/dp/collective/rendezvous_store.hpp"
#include "actors/dp/compression/compressed_allreduce.hpp"
#include "actors/dp/trainer/piece_agreement.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"
#include "troupe/loop_group.hpp"  // reduce_done, sync_result

namespace troupe {

struct group_form {
  uint64_t generation = 0;
  uint32_t rank = 0;
  uint32_t size = 1;
  uint64_t token = 0;  // proves our store requests to the coordinator
  uint64_t key = 0;    // the generation's group key (the actors backend's chunks)
  collective_kind collective = collective_kind::gloo;
  std::string bind_host = "127.0.0.1";  // where the other members reach this one
  std::chrono::milliseconds timeout{30000};
  rendezvous_actor coordinator;    // its store: the dp coordinator, or a loop group
  std::vector<std::string> hosts;  // each rank's host label
  bool two_level = false;          // reduce inside hosts (NCCL where each has a GPU), then across
  // Another rendezvous than the coordinator's (troupe-bench's file_store); none: the
  // coordinator's.
  std::shared_ptr<rendezvous_store> store;
};

// What a reduce order does with its values: sum them on every member, or, for sharded state
// (--zero-stage 1; sharded_reduce and sharded_gather, in place), sum each member's piece on that
// member only, or give every member every member's piece of them.
enum class reduce_op : uint8_t { allreduce, reduce_scatter, all_gather };

// Sum `data` over the members (or, as `op` says, half of that). The buffer belongs to the sender
// and must stay untouched until the reply; `owner` keeps it alive while the order is in flight (a
// sender that stops meanwhile must not leave the backend sending from freed memory), and the error
// buffers too. Values [0, plain) are always summed in fp32; the rest travel packed by `codec`
// (actors/dp/compression/compressed_allreduce.hpp), with `errors` under 1-bit.
struct reduce_order {
  std::span<float> data;
  uint32_t tag = 0;
  std::shared_ptr<const void> owner;
  kernels::wire_codec codec = kernels::wire_codec::fp32;
  size_t plain = 0;
  error_feedback errors;
  reduce_op op = reduce_op::allreduce;
  uint32_t copies = 1;  // reduce_scatter: the pieces this member sums (its own, its backups')
  // Called on the group's thread once the values are summed (not when the collective failed),
  // before the reply: --zero-stage 2 copies its pieces' sums out of a bucket buffer it reuses.
  std::function<void()> summed;
};

// A member's state in the agreement after a generation forms (allreduce_group's sync), moved
// in pieces: the messages of the state (each under the codec's caps), then its large arrays as
// they are. The group calls it on its own thread while the member waits for the answer: as the
// source, each_message() and arrays(); as a member that takes the state, take() each message,
// targets() for the arrays (before any array moves), then finish(). Nothing ever holds the
// whole state twice.
class state_pieces {
 public:
  virtual ~state_pieces() = default;
  virtual caf::error each_message(
      const std::function<caf::error(std::span<const char>)>& put) const = 0;
  virtual std::vector<std::span<const float>> arrays() const = 0;
  virtual caf::error take(std::span<const char> message) = 0;
  // Where the arrays go, `sizes` being the source's; an error when they do not fit this member.
  virtual caf::expected<std::vector<std::span<float>>> targets(
      const std::vector<uint64_t>& sizes) = 0;
  virtual caf::error finish() = 0;
  // This member's state is gone (it began taking another's and did not finish): it may not be
  // the source of a later agreement.
  virtual bool spoiled() const = 0;
};

// State held as bytes (a Python loop's): messages of at most max_piece_bytes, no arrays. The
// bytes taken grow as the pieces come, never by a size a peer announced.
class byte_pieces final : public state_pieces {
 public:
  static constexpr size_t max_piece_bytes = size_t{8} << 20;
  explicit byte_pieces(std::vector<char> bytes) : bytes_(std::move(bytes)) {}
  caf::error each_message(
      const std::function<caf::error(std::span<const char>)>& put) const override;
  std::vector<std::span<const float>> arrays() const override { return {}; }
  caf::error take(std::span<const char> message) override;
  caf::expected<std::vector<std::span<float>>> targets(const std::vector<uint64_t>& sizes) override;
  caf::error finish() override { return {}; }
  bool spoiled() const override { return taking_; }
  // After the agreement: the state taken (empty when this member kept its own).
  std::vector<char> taken() && { return taking_ ? std::move(bytes_) : std::vector<char>{}; }

 private:
  std::vector<char> bytes_;
  bool taking_ = false;
};

// After forming a generation the members agree on one state: each says how many steps it has
// applied and offers its state; the member with the most steps (the lowest rank among equals)
// sends its state to each member that is behind it (all of them at step 0, so that every
// replica starts from the same values). `state` is kept alive until the agreement is done.
struct sync_order {
  uint64_t steps = 0;
  std::shared_ptr<state_pieces> state;
};

// What the group's sync runs on its backend (public for its tests): the members' offers, then
// the source's state to the members behind it; errc::job_failed when no member holds a state,
// shape_mismatch when a member cannot take the source's.
caf::expected<std::shared_ptr<sync_result>> agree_on_state(collective& c, const sync_order& order,
                                                           std::chrono::milliseconds timeout);

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const troupe::group_form>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const troupe::reduce_order>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::reduce_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<const troupe::sync_order>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::sync_result>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::piece_exchange>)

namespace troupe {

//   form:   connects this member to the others (blocking, at most the form's timeout)
//   reduce: one bucket -> reduce_done, or the backend's error; the backend is then closed at
//           once (its peers fail fast instead of waiting for their timeout) until formed again
//   sync:   this member's steps and state -> the state every member goes on from; or its
//           pieces of sharded state -> cut anew for the generation (agree_on_pieces)
using allreduce_group_actor = caf::typed_actor<
    caf::replies_to<form_atom, std::shared_ptr<const group_form>>::with<bool>,
    caf::replies_to<reduce_atom, std::shared_ptr<const reduce_order>>::with<reduce_done>,
    caf::replies_to<sync_atom,
                    std::shared_ptr<const sync_order>>::with<std::shared_ptr<sync_result>>,
    caf::replies_to<sync_atom,
                    std::shared_ptr<piece_exchange>>::with<std::shared_ptr<sync_result>>>;

struct allreduce_group_state {
  static inline const char* name = "troupe.allreduce_group";
  std::unique_ptr<collective> backend;
  std::vector<std::string> hosts;  // each rank's host label, this generation
  std::chrono::milliseconds timeout{30000};
  caf::error spoiled;          // the error that closed the backend, if any
  std::vector<float> scratch;  // compressed sums' packed chunks
};

allreduce_group_actor::behavior_type allreduce_group(
    allreduce_group_actor::stateful_pointer<allreduce_group_state> self, logger log);

}  // namespace troupe
