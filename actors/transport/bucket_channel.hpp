// bucket_channel: how one client's requests reach one bucket. choose_channel() picks it once
// per bucket handle, from where the bucket is:
//   in-process  the bucket is an actor of this process: messages are handed over as they are,
//               a push's gradient gathered into the message, nothing encoded;
//   lane        the bucket's node has a data lane from this client: the lane_link itself
//               (actors/transport/lane_client.hpp), frames written from the caller's thread, a
//               push's gradient encoded from where it is straight onto the socket or the
//               same-host ring, push-then-pull as one pair;
//   caf         otherwise: encoded messages over CAF's connection to the bucket's node.
// Each call writes the request at once and returns the id its answer comes back under, as the
// response to a request of `self` (the bucket's reply wire, or an error): answer_to() gives its
// handle. Requests over a lane may wait (up to its timeout) for a stopped server: a requester
// with lanes runs detached. Actors call them through bucket_client; benchmarks and tests of the
// lane (from blocking actors) call them directly.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <caf/blocking_actor.hpp>
#include <caf/local_actor.hpp>
#include <caf/message_id.hpp>
#include <caf/response_handle.hpp>

#include "messages/protocol.hpp"
#include "troupe/values.hpp"

namespace troupe {

class lane_map;  // actors/transport/lane_client.hpp

// A push's dense gradient, where the pusher keeps it (it must stay there until the bucket
// acknowledges, so that a resend carries the same values); none: the push carries what it
// has (its sign tensors, rows, or nothing when skipped).
using gradient_views = std::optional<std::vector<dense_view>>;

class bucket_channel {
 public:
  virtual ~bucket_channel() = default;
  // "in-process", "lane" or "caf".
  virtual const char* name() const = 0;
  // The response ids of a pull and of a push; `bytes` gets the size written (0 in-process).
  virtual caf::message_id pull(caf::local_actor* self, const bucket_actor& target,
                               const pull_request& request) = 0;
  virtual caf::message_id push(caf::local_actor* self, const bucket_actor& target,
                               const push_request& push, const gradient_views& grad,
                               size_t& bytes) = 0;
  // The push, and behind it the pull of the same bucket: the push's response id first. On its
  // own channel each is its own request; a lane writes them as one pair of frames.
  virtual std::pair<caf::message_id, caf::message_id> push_then_pull(
      caf::local_actor* self, const bucket_actor& target, const push_request& push,
      const gradient_views& grad, const pull_request& request, size_t& bytes);
};

// Each channel on its own: over CAF, each request bounded by `timeout`; handed over in this
// process. (A lane is a channel itself: lane_link, actors/transport/lane_client.hpp.)
std::shared_ptr<bucket_channel> caf_channel_of(std::chrono::milliseconds timeout);
std::shared_ptr<bucket_channel> in_process_channel_of(std::chrono::milliseconds timeout);

// The handle of the answer to a channel's request `id` of `self`: then() for an event-based
// actor, receive() for a blocking one.
template <class Self>
auto answer_to(Self* self, caf::message_id id) {
  constexpr bool blocking = std::is_base_of<caf::blocking_actor, Self>::value;
  return caf::response_handle<Self, caf::message, blocking>{id, self};
}

// The channel for bucket `target` as seen from `self`: in-process on its node, the lane of
// its node when `lanes` holds an open one, CAF otherwise (each CAF request bounded by `timeout`;
// a lane bounds its own).
std::shared_ptr<bucket_channel> choose_channel(caf::local_actor* self, const bucket_actor& target,
                                               const lane_map& lanes,
                                               std::chrono::milliseconds timeout);

}  // namespace troupe
