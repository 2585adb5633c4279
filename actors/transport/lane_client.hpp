// lane_client: a worker's end of a data lane to one server node (lane_socket.hpp,
// lane_server.hpp). lane_link::open() connects and proves the cluster secret, then starts the
// link's reader thread. The requesting actor writes each request as a frame itself, on its own
// thread, and the reader hands the frame that answers it straight to that actor as the
// response to its request id: no actor between them, one thread hop per request. On a
// same-host lane large payloads go through the rings it shares with the server (lane_ring.hpp):
// a request's are copied in, an answer's are lent to the requester (wire::borrowed), which
// decodes them where they are.
//
// The answer is what the bucket itself would have answered over CAF. A bucket that is not on
// that node or did not answer, a lost connection, and an answer later than the lane's timeout
// come back as CAF errors (not troupe's), which the worker treats as a bucket gone: it asks the
// coordinator for the current handle and sends again. The reader checks deadlines every
// quarter of the timeout (one poll timeout, no CAF timer per request: each costs the clock
// thread two wake-ups), so a late request fails between 1 and 1.25 timeouts after it was
// written; a lost connection fails everything in flight at once.
//
// A lane_link is the bucket_channel (actors/client) of every bucket on its server node: requests
// are written from the caller's thread, and may wait (up to the timeout) for a stopped server,
// so a requester with lanes runs detached.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "actors/transport/bucket_channel.hpp"
#include "actors/transport/lane_socket.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

class lane_link final : public bucket_channel {
 public:
  // Connects to host:port within `timeout`, proves `secret` and starts the reader. With
  // `same_host`, moves to the server's Unix socket where it can reach it and finds the same node
  // there (lane_socket.hpp); TCP otherwise.
  static caf::expected<std::shared_ptr<lane_link>> open(const std::string& host, uint16_t port,
                                                        const std::string& secret,
                                                        std::chrono::milliseconds timeout,
                                                        bool same_host = true);
  // `rings`: what a same-host lane shares with its server (lane_ring.hpp); none on TCP.
  lane_link(int fd, std::string node, std::chrono::milliseconds timeout, bool local,
            lane::ring_pair rings = {});
  lane_link(const lane_link&) = delete;
  lane_link& operator=(const lane_link&) = delete;
  // Ends the connection, fails what is in flight and waits for the reader.
  ~lane_link();

  // The server's CAF node id, as to_string writes it.
  const std::string& node() const { return node_; }
  // True when the lane is a same-host Unix socket.
  bool local() const { return local_; }
  // True once the connection has ended: its node's messages go over CAF.
  bool broken() const { return broken_; }
  // Frames whose payload went through the shared rings, both ways (none on TCP).
  uint64_t ring_frames() const { return ring_frames_; }

  // The lane as a bucket's channel (bucket_channel.hpp): each request written as a frame from
  // the caller's thread, its answer (or the error that stands for it) coming back as the
  // response to the returned id. A push's dense gradient is encoded from where it is onto the
  // socket or the ring; push_then_pull writes the push and the pull behind it as paired frames,
  // which the server answers in one write once the pull's answer is ready (lane_socket.hpp), so
  // a step costs each side one wake-up per bucket instead of two.
  const char* name() const override { return "lane"; }
  caf::message_id pull(caf::local_actor* self, const bucket_actor& target,
                       const pull_request& request) override;
  caf::message_id push(caf::local_actor* self, const bucket_actor& target, const push_request& push,
                       const gradient_views& grad, size_t& bytes) override;
  std::pair<caf::message_id, caf::message_id> push_then_pull(
      caf::local_actor* self, const bucket_actor& target, const push_request& push,
      const gradient_views& grad, const pull_request& request, size_t& bytes) override;

  // Writes a request's bytes as they are (push or pull frame `kind` for the bucket whose actor
  // id is `target`): for tests and tools that write what no encoder would. Its answer reaches
  // `requester` as the response to `request_id`.
  void send(const caf::strong_actor_ptr& requester, caf::message_id request_id,
            lane::frame_kind kind, uint64_t target, byte_parts payload);

 private:
  struct request_frame {
    caf::message_id id;
    lane::frame_kind kind;
    byte_parts payload;
  };
  // Hands the push's bytes to `write` as parts: a dense gradient encoded from where it is, with
  // no copy between it and the socket.
  static size_t write_push(const push_request& push, const gradient_views& grad,
                           const std::function<void(byte_parts)>& write);
  // Numbers the requests, records who waits for each answer and writes them in one call (the
  // first marked paired when `paired`); when the lane is broken or full, each requester is
  // answered with the error instead.
  void write_requests(const caf::strong_actor_ptr& requester, uint64_t target,
                      std::span<const request_frame> requests, bool paired);
  struct waiting {
    caf::actor_addr requester;
    caf::message_id response_id;
    std::chrono::steady_clock::time_point deadline;
  };
  void read_answers();
  void sweep();
  void fail_all(const std::string& why);
  // Delivers `msg` as the response to the request written as `frame`, if one still waits.
  void deliver(uint64_t frame, caf::message msg);

  lane::socket_fd socket_;
  std::string node_;
  std::chrono::milliseconds timeout_;
  bool local_;
  std::atomic<bool> broken_{false};
  std::atomic<uint64_t> ring_frames_{0};
  std::mutex write_mutex_;                  // one frame at a time on the socket
  std::unique_ptr<lane::shared_ring> out_;  // requests' payloads (under write_mutex_)
  std::shared_ptr<lane::shared_ring> in_;   // answers' payloads (the reader's, lent on)
  std::mutex mutex_;                        // guards pending_ and next_frame_
  std::unordered_map<uint64_t, waiting> pending_;
  uint64_t next_frame_ = 0;
  std::thread reader_;
};

// The lanes one requester holds, one per server node.
class lane_map {
 public:
  void add(std::shared_ptr<lane_link> link) { by_node_[link->node()] = std::move(link); }
  // Opens the lane to host:port (lane_link::open) and adds it: true. When it cannot, warns on
  // `log` that `whose` requests to that node go over CAF instead: false.
  bool open(const std::string& host, uint16_t port, const std::string& secret,
            std::chrono::milliseconds timeout, const logger& log, const std::string& whose);
  // The open lane to `node`, or null (no lane, or it ended: CAF carries the message).
  std::shared_ptr<lane_link> find(const caf::node_id& node) const;
  bool empty() const { return by_node_.empty(); }

 private:
  std::map<std::string, std::shared_ptr<lane_link>> by_node_;
};

}  // namespace troupe
