// lane_server: a server node's end of the data lanes (lane_socket.hpp). It listens beside the
// node's CAF port, and on a same-host Unix socket that it names to each client; every worker
// that proves the cluster secret gets a connection with a reader thread, a writer thread and a
// companion actor. The reader puts each push or pull frame straight into the named bucket's
// mailbox as a request from the companion (same messages, same bucket code, so resends,
// fencing and promotion behave alike); the bucket's answer reaches the companion on the
// bucket's own thread, which writes it through or posts it to the writer. On the same-host
// socket both ends share rings (lane_ring.hpp) that carry large payloads beside the socket. No
// actor stands between the socket and the bucket, so a frame costs no scheduler hop. A bucket that
// does not answer within the timeout is answered `gone` by the reader's deadline sweep (every sweep
// period, no timer per frame). Only buckets enrolled here can be named; any other id is answered
// `gone`, and the worker asks the coordinator for the bucket's current handle as it does for a
// bucket that went down.
//
// Owned by the server node (server_config::lanes); stop() (or the destructor) ends every
// connection and joins every thread. Blocking set-up: call start() from main or a detached
// actor.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

struct lane_listener_config {
  std::string host;                          // where to listen (the node's --listen host)
  uint16_t port = 0;                         // 0: any free port
  std::string secret;                        // the cluster secret every client proves
  std::chrono::milliseconds timeout{30000};  // handshakes, frames, and the buckets' answers
  logger log;
  bool same_host = true;  // also offer a Unix socket to clients on this host (lane_socket.hpp)
};

// The buckets a lane may name, by CAF actor id (weak: a bucket that ended is not kept alive).
class lane_directory {
 public:
  void enroll(const bucket_actor& bucket);
  bucket_actor find(uint64_t actor_id) const;  // null when unknown or ended

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, caf::actor_addr> buckets_;
};

class lane_listener {
 public:
  static constexpr size_t max_connections = 1024;
  static constexpr int max_frames_in_flight = 64;  // per connection, read ahead of answers

  // Listens and starts accepting; io_failure when it cannot listen.
  static caf::expected<std::shared_ptr<lane_listener>> start(caf::actor_system& sys,
                                                             lane_listener_config config);
  // Takes over the listening sockets: TCP on `port`, and the Unix socket `local` (fd -1: none).
  lane_listener(caf::actor_system& sys, lane_listener_config config, int listen_fd, uint16_t port,
                std::pair<int, std::string> local);
  lane_listener(const lane_listener&) = delete;
  lane_listener& operator=(const lane_listener&) = delete;
  ~lane_listener();

  uint16_t port() const { return port_; }
  // The same-host socket's name (empty: none).
  const std::string& local_name() const { return local_name_; }
  // Frames may name `bucket` from now on (a new, restarted or promoted bucket of this node).
  void enroll(const bucket_actor& bucket) { directory_->enroll(bucket); }
  // Stops accepting and ends every connection; idempotent.
  void stop();

  struct connection;

 private:
  void accept_loop();
  // A new connection, unless max_connections are open; `local`: on the same-host socket.
  void admit(int fd, bool local);
  void serve(std::shared_ptr<connection> c);
  void forget_finished();

  caf::actor_system& sys_;
  const lane_listener_config config_;
  const int listen_fd_;
  const uint16_t port_;
  const int local_fd_;
  const std::string local_name_;
  const std::shared_ptr<lane_directory> directory_ = std::make_shared<lane_directory>();
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;  // guards connections_
  std::vector<std::shared_ptr<connection>> connections_;
  std::thread acceptor_;
};

}  // namespace troupe
