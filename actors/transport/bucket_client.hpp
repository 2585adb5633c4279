// bucket_client: the one client of the parameter buckets. The ps worker, the hybrid trainer's
// tables and the app API's parameter_client all send their pulls and pushes through it.
//
// Per bucket it owns the current handle and its channel (bucket_channel.hpp, chosen once per
// handle), the clock of the values last pulled (what a push is stamped with), and every request
// in flight. A request whose bucket is gone (its actor down, its node lost, no answer within
// the bound, a backup promoted) is sent again to the bucket's successor, which the owner's
// `find_again` names (through the coordinator for jobs and an app's service on servers, the
// supervisor for an in-process one); a push
// sent again is marked a resend, so that a bucket that already has it acknowledges it without
// applying it twice. After `max_attempts` tries, or when the bucket answers with a refusal, the
// request fails with a bucket_failure.
//
// With a `window`, at most that many requests are in flight at once and the others wait their
// turn in the order they were made (a bucket still sees one sender's requests in order), so
// that a model of any size has at most a window of buckets' messages in flight from here.
//
// It lives in one actor's state and its calls are that actor's (`self`), made from its
// handlers; an owner that monitors its buckets passes their down messages to on_down(), so that
// a lost node's requests go again at once instead of timing out.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <caf/scheduled_actor.hpp>

#include "actors/transport/bucket_channel.hpp"
#include "actors/transport/lane_client.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

// Why a request failed for good: `refused` when the bucket answered with an error of its own
// (a malformed or non-finite push, an unknown worker), or its answer could not be read;
// otherwise it could not be reached, however often it was found again.
struct bucket_failure {
  caf::error error;
  bool refused = false;
};

// Names bucket b's successor of `failed`, which did not answer (`why`), by calling `found`; or
// an error. It may call `found` later (a coordinator being taken over), but once.
using bucket_finder =
    std::function<void(size_t b, const bucket_actor& failed, const caf::error& why,
                       std::function<void(caf::expected<bucket_actor>)> found)>;

struct bucket_client_config {
  std::vector<bucket_actor> buckets;  // by bucket id
  lane_map lanes;                     // data lanes to server nodes (none: CAF and in-process)
  std::chrono::milliseconds timeout{30000};  // each request over CAF (a lane bounds its own)
  bucket_finder find_again;
  int max_attempts = 5;
  logger log;
  // Called with the bytes of each push written, and of each pull answer read (metrics).
  std::function<void(double out, double in)> count_bytes;
  // Monitor every bucket handle (the owner then passes their down messages to on_down()).
  bool monitor = false;
  // Requests in flight at most (0: no bound). A pull a bucket holds (ssp, bsp) takes its place
  // in the window until answered: set one only where every held pull waits for pushes that
  // come before it (a ps worker's rounds), not for a push made after it.
  size_t window = 0;
};

class bucket_client : public std::enable_shared_from_this<bucket_client> {
 public:
  using values_handler = std::function<void(pull_reply&)>;
  using ack_handler = std::function<void(const push_ack&)>;
  using failure_handler = std::function<void(bucket_failure)>;

  // Handlers of requests in flight hold the client: it lives until they are answered.
  static std::shared_ptr<bucket_client> make(caf::scheduled_actor* self,
                                             bucket_client_config config);
  bucket_client(const bucket_client&) = delete;
  bucket_client& operator=(const bucket_client&) = delete;

  size_t size() const { return buckets_.size(); }
  const bucket_actor& bucket(size_t b) const { return buckets_[b].handle; }
  const char* channel_name(size_t b) const { return buckets_[b].channel->name(); }
  // The clock of bucket b's values last pulled through this client.
  const vector_clock& read_clock(size_t b) const { return buckets_[b].read_clock; }
  // Bucket b is `handle` from now on (a new generation named it): its channel is chosen again.
  void set_bucket(size_t b, bucket_actor handle);

  // Pulls bucket b. The answer's dense values go where `place` says (decode_pull_into); `done`
  // gets the rest (rows, clock) once they are in.
  void pull(size_t b, pull_request request, value_place place, values_handler done,
            failure_handler failed);
  // Pushes `push` to bucket b with its dense gradient `grad` (which must stay where it is until
  // `done` or `failed` is called).
  void push(size_t b, std::shared_ptr<push_request> push, gradient_views grad, ack_handler done,
            failure_handler failed);
  // The push and the pull behind it: one pair of frames on a lane, two requests otherwise.
  void push_then_pull(size_t b, std::shared_ptr<push_request> push, gradient_views grad,
                      pull_request request, value_place place, ack_handler acked,
                      values_handler pulled, failure_handler push_failed,
                      failure_handler pull_failed);

  // A monitored bucket's actor is down: the requests in flight to it go again now.
  void on_down(const caf::down_msg& msg);

 private:
  struct bucket_route {
    bucket_actor handle;
    std::shared_ptr<bucket_channel> channel;
    vector_clock read_clock;
    caf::actor_addr down;  // the handle known to be down (not yet replaced)
  };
  // A request on its way: what sends it again elsewhere if its bucket goes first.
  struct in_flight {
    bucket_actor target;
    std::function<void(const caf::error&)> lost;
  };
  struct pull_call {
    size_t b;
    pull_request request;
    value_place place;
    values_handler done;
    failure_handler failed;
    int attempt = 0;
  };
  struct push_call {
    size_t b;
    std::shared_ptr<push_request> push;
    gradient_views grad;
    ack_handler done;
    failure_handler failed;
    int attempt = 0;
  };

  bucket_client(caf::scheduled_actor* self, bucket_client_config config);
  void send_pull(std::shared_ptr<pull_call> call);
  void send_push(std::shared_ptr<push_call> call);
  void send_pair(std::shared_ptr<push_call> pushing, std::shared_ptr<pull_call> pulling);
  // Records the request as in flight and attaches its handlers to response `id`.
  void expect_values(std::shared_ptr<pull_call> call, caf::message_id id);
  void expect_ack(std::shared_ptr<push_call> call, caf::message_id id);
  // Bucket b's `target` did not answer: once its successor is known (asked for unless a newer
  // handle is already here), runs `retry`; `give_up` after max_attempts or when nobody knows.
  void find_again(size_t b, const bucket_actor& target, int attempt, const caf::error& why,
                  std::function<void()> retry, failure_handler give_up);
  void pull_lost(std::shared_ptr<pull_call> call, const bucket_actor& target,
                 const caf::error& why);
  void push_lost(std::shared_ptr<push_call> call, const bucket_actor& target,
                 const caf::error& why);
  bool is_down(size_t b) const { return buckets_[b].down == buckets_[b].handle.address(); }
  uint64_t track(const bucket_actor& target, std::function<void(const caf::error&)> lost);
  bool settle(uint64_t ticket);
  // Sends a new request of `requests` messages now if the window has room and none waits,
  // else queues it; send_waiting() sends the queued ones the window has room for.
  void admit(size_t requests, std::function<void()> send);
  void send_waiting();
  bool window_has_room(size_t requests) const;

  caf::scheduled_actor* self_;
  bucket_client_config config_;
  std::vector<bucket_route> buckets_;
  std::map<uint64_t, in_flight> in_flight_;
  std::deque<std::pair<size_t, std::function<void()>>> waiting_;  // (requests, send)
  uint64_t tickets_ = 0;
};

}  // namespace troupe
