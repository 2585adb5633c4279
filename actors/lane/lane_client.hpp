// lane_client: a worker's end of a data lane to one server node (lane_socket.hpp,
// lane_server.hpp). open_lane() connects and proves the cluster secret, then spawns the
// client actor, which writes each request as a frame and delivers the frame that answers it:
//   (lane_atom, bucket actor id, push_atom or pull_atom, wire) -> wire, or the bucket's error
// The answer is what the bucket itself would have answered over CAF. A bucket that is not on
// that node or did not answer, a lost connection, and an answer later than the lane's timeout
// come back as CAF errors (not troupe's), which the worker treats as a bucket gone: it asks the
// coordinator for the current handle and sends again. When its connection is lost the client
// fails what is in flight and quits; it also quits when `owner` does.
//
// ask_bucket() is how a caller sends a pull or push: over the lane of the bucket's node when
// it holds one, over CAF otherwise. Blocking set-up: call open_lane from a detached actor.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <map>
#include <string>

#include "messages/protocol.hpp"

namespace troupe {

struct lane_handle {
  std::string node;  // the server's CAF node id, as to_string writes it
  caf::actor client;
};

caf::expected<lane_handle> open_lane(caf::actor_system& sys, const std::string& host, uint16_t port,
                                     const std::string& secret, std::chrono::milliseconds timeout,
                                     caf::actor_addr owner);

// The lanes one worker holds, one per server node.
class lane_map {
 public:
  void add(lane_handle lane) { by_node_[std::move(lane.node)] = std::move(lane.client); }
  // The lane to `node`, or null (no lane: CAF carries the message).
  caf::actor find(const caf::node_id& node) const;
  // Drops the lane whose client is `client` (it quit); true if it was one of ours.
  bool forget(const caf::actor_addr& client);
  bool empty() const { return by_node_.empty(); }

 private:
  std::map<std::string, caf::actor> by_node_;
};

// Sends (atom, w) to `target` over its node's lane when `lanes` has one, over CAF otherwise,
// and hands the answer to on_reply(const wire&) or on_error(caf::error&).
template <class Self, class Atom, class Duration, class OnReply, class OnError>
void ask_bucket(Self* self, const lane_map& lanes, const bucket_actor& target, Duration timeout,
                Atom atom, wire w, OnReply on_reply, OnError on_error) {
  if (auto lane = lanes.find(target.node()))
    self->request(lane, timeout, lane_atom_v, uint64_t{target.id()}, atom, std::move(w))
        .then(std::move(on_reply), std::move(on_error));
  else
    self->request(target, timeout, atom, std::move(w))
        .then(std::move(on_reply), std::move(on_error));
}

}  // namespace troupe
