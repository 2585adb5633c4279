#include "actors/transport/lane_server.hpp"
#include "actors/transport/lane_connection.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <caf/actor_companion.hpp>
#include <caf/mailbox_element.hpp>

#include <optional>

#include "actors/transport/lane_socket.hpp"
#include "troupe/error.hpp"

namespace troupe {

void lane_directory::enroll(const bucket_actor& bucket) {
  std::lock_guard<std::mutex> lock{mutex_};
  buckets_[bucket.id()] = bucket.address();
}

bucket_actor lane_directory::find(uint64_t actor_id) const {
  std::lock_guard<std::mutex> lock{mutex_};
  auto i = buckets_.find(actor_id);
  if (i == buckets_.end()) return {};
  return caf::actor_cast<bucket_actor>(i->second);
}

namespace {

using connection_ptr = std::shared_ptr<lane_listener::connection>;

// Posts one answer (lane_connection.hpp says when it is written), its payload in bytes or
// unwritten.
void answer(lane_listener::connection& c, uint64_t id, lane::frame_kind kind, wire_bytes payload,
            std::shared_ptr<const unwritten_bytes> unwritten = {}) {
  lane::frame_header h;
  h.kind = static_cast<uint8_t>(kind);
  h.id = id;
  h.size = unwritten ? unwritten->size() : payload.size();
  c.post({h, std::move(payload), std::move(unwritten)});
}

void answer(lane_listener::connection& c, uint64_t id, lane::frame_kind kind,
            const std::string& text) {
  answer(c, id, kind, wire_bytes(text.begin(), text.end()));
}

// A bucket's troupe error travels as its code and context text (the client makes the same
// error again); anything else (a timeout, a bucket that ended) as `gone`.
void answer_error(lane_listener::connection& c, uint64_t id, const caf::error& err) {
  std::string text;
  const auto& ctx = err.context();
  if (ctx.match_elements<std::string>()) text = ctx.get_as<std::string>(0);
  if (err && err.category() == error_category) {
    text.insert(text.begin(), static_cast<char>(err.code()));
    return answer(c, id, lane::frame_kind::refusal, text);
  }
  text = describe(err);
  answer(c, id, lane::frame_kind::gone, text);
}

// What a bucket answered (on the bucket's thread, through the connection's companion): its
// wire, or its error, posted to the writer as the answer to the frame it was asked for.
void on_answer(lane_listener::connection& c, caf::mailbox_element& m) {
  if (!m.mid.is_response()) return;  // the companion is only ever answered
  const auto frame = c.settle(m.mid.request_id().integer_value());
  if (!frame) return;  // swept already: the client was told `gone`
  auto& content = m.content();
  if (content.match_elements<wire>()) {
    wire& r = content.get_mutable_as<wire>(0);
    wire out = r.bytes.empty() && r.local ? encoded(r) : std::move(r);
    return answer(c, *frame, lane::frame_kind::reply, std::move(out.bytes),
                  std::move(out.unwritten));
  }
  if (content.match_elements<caf::error>())
    return answer_error(c, *frame, content.get_as<caf::error>(0));
  answer(c, *frame, lane::frame_kind::gone, std::string{"the bucket answered something else"});
}

// The actor a connection's buckets answer: not scheduled; it hands each answer to on_answer on
// the thread that delivers it. Hidden: the actor system does not wait for it at shutdown.
caf::actor make_companion(caf::actor_system& sys, const connection_ptr& c) {
  auto companion = sys.spawn<caf::actor_companion, caf::hidden>();
  auto* raw = static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(companion));
  raw->on_enqueue([c](caf::mailbox_element_ptr m) {
    if (m) on_answer(*c, *m);
  });
  return companion;
}

// Drops the companion's handler (and with it the connection it holds): later answers are
// dropped. (actor_companion::disconnect is declared but not in Debian's CAF 0.17 library.)
void disconnect(caf::actor& companion) {
  if (!companion) return;
  static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(companion))
      ->on_enqueue({});
  companion = nullptr;
}

// Puts request frame `h` into its bucket's mailbox as a request from the connection's
// companion (no actor between them), owed an answer within `timeout`; a paired push's answer
// is held for its pull's. Answers `gone` at once when the bucket is unknown or the frame
// number is already owed an answer. True when the bucket has it.
bool pass_to_bucket(lane_listener::connection& c, const lane_directory& directory,
                    std::chrono::milliseconds timeout, const lane::frame_header& h, wire w) {
  const auto bucket = directory.find(h.target);
  if (!bucket) {
    answer(c, h.id, lane::frame_kind::gone,
           "no bucket " + std::to_string(h.target) + " on this node");
    return false;
  }
  auto* companion =
      static_cast<caf::local_actor*>(caf::actor_cast<caf::abstract_actor*>(c.companion));
  const auto id = companion->new_request_id(caf::message_priority::normal);
  if (!c.owe(id.request_id().integer_value(), h.id, std::chrono::steady_clock::now() + timeout)) {
    answer(c, h.id, lane::frame_kind::gone, std::string{"a frame number already in flight"});
    return false;
  }
  const bool push = h.kind == static_cast<uint8_t>(lane::frame_kind::push);
  if (push && h.paired) c.hold_for_pull(h.id);  // before the bucket can answer
  // A pull's values may be written straight into the ring: the companion writes the answer
  // as it is delivered, on the bucket's thread. (Without a ring it would only be gathered,
  // under the connection's lock.)
  w.reply_unwritten = !push && c.out_ring != nullptr;
  auto msg = push ? caf::make_message(push_atom_v, std::move(w))
                  : caf::make_message(pull_atom_v, std::move(w));
  // A bucket that has ended answers the request with an error (CAF bounces it).
  caf::actor_cast<caf::abstract_actor*>(bucket)->enqueue(
      caf::actor_cast<caf::strong_actor_ptr>(c.companion), id, std::move(msg), nullptr);
  return true;
}

}  // namespace

caf::expected<std::shared_ptr<lane_listener>> lane_listener::start(caf::actor_system& sys,
                                                                   lane_listener_config config) {
  auto bound = lane::listen_on(config.host, config.port);
  if (!bound) return std::move(bound.error());
  std::pair<int, std::string> local{-1, ""};
  if (config.same_host) {
    if (auto named = lane::listen_local())
      local = std::move(*named);
    else
      config.log.warn("no same-host data lane ({}); local clients use TCP",
                      describe(named.error()));
  }
  auto out = std::make_shared<lane_listener>(sys, std::move(config), bound->first, bound->second,
                                             std::move(local));
  out->acceptor_ = std::thread([raw = out.get()] { raw->accept_loop(); });
  return out;
}

lane_listener::lane_listener(caf::actor_system& sys, lane_listener_config config, int listen_fd,
                             uint16_t port, std::pair<int, std::string> local)
    : sys_(sys),
      config_(std::move(config)),
      listen_fd_(listen_fd),
      port_(port),
      local_fd_(local.first),
      local_name_(std::move(local.second)) {}

lane_listener::~lane_listener() {
  stop();
  ::close(listen_fd_);
  if (local_fd_ >= 0) ::close(local_fd_);
}

void lane_listener::stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<connection_ptr> all;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    all.swap(connections_);
  }
  for (auto& c : all) c->close();
  for (auto& c : all)
    if (c->reader.joinable()) c->reader.join();
}

void lane_listener::accept_loop() {
  lane::name_thread("lane.accept");
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {local_fd_, POLLIN, 0}};  // fd -1 is skipped
    if (::poll(p, 2, 100) <= 0) continue;                             // wakes to see stopping_
    for (const auto& ready : p) {
      if (!(ready.revents & POLLIN)) continue;
      const int fd = ::accept4(ready.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) admit(fd, ready.fd == local_fd_);
    }
  }
}

void lane_listener::admit(int fd, bool local) {
  forget_finished();
  std::lock_guard<std::mutex> lock{mutex_};
  if (connections_.size() >= max_connections) {
    config_.log.warn("data lane: {} connections open; refusing another", connections_.size());
    ::close(fd);
    return;
  }
  auto c = std::make_shared<connection>(fd, local);
  c->reader = std::thread([this, c] { serve(c); });
  connections_.push_back(std::move(c));
}

// The reader thread of one connection: the handshake, then frames until either side ends it.
// Each frame goes straight into its bucket's mailbox as a request from the connection's
// companion (no actor between them); while the socket is quiet, owed frames past their
// deadline are answered `gone` every sweep period.
void lane_listener::serve(connection_ptr c) {
  lane::name_thread("lane.reader");
  lane::tune(c->socket.get(), config_.timeout);
  if (auto err = lane::accept_lane(c->socket, config_.secret, to_string(sys_.node()), local_name_,
                                   config_.timeout)) {
    config_.log.warn("data lane: a client was refused: {}", describe(err));
    c->finished = true;
    return;
  }
  if (c->local) {
    auto rings = lane::share_rings(c->socket.get(), lane::ring_bytes, config_.timeout);
    if (!rings) {
      config_.log.warn("data lane: sharing rings with a client failed: {}",
                       describe(rings.error()));
      c->finished = true;
      return;
    }
    c->out_ring = std::move(rings->out);
    c->in_ring = std::move(rings->in);
  }
  c->companion = make_companion(sys_, c);
  const auto period = lane::sweep_period(config_.timeout);
  c->writer = std::thread([c] { c->write_answers(); });
  auto last_sweep = std::chrono::steady_clock::now();
  lane::frame_reader frames{c->socket};
  struct {
    bool open = false;  // the last frame was a paired push, passed on
    uint64_t id = 0, target = 0;
  } paired;
  for (;;) {
    if (!c->reserve(2 * config_.timeout, period)) break;
    auto ready = frames.readable(period);
    for (;;) {  // late frames are answered every period, busy or quiet
      const auto now = std::chrono::steady_clock::now();
      if (now - last_sweep >= period) {
        c->sweep();
        last_sweep = now;
      }
      if (!ready || *ready) break;
      ready = frames.readable(period);
    }
    lane::frame_header h;
    wire w;
    if (!ready) break;
    if (auto err = frames.read(config_.timeout, h, w.bytes, c->in_ring.get())) {
      if (!has_code(err, errc::io_failure)) config_.log.warn("data lane: {}", describe(err));
      break;
    }
    const auto kind = static_cast<lane::frame_kind>(h.kind);
    if (kind != lane::frame_kind::push && kind != lane::frame_kind::pull) {
      config_.log.warn("data lane: a client sent an answer frame");
      break;
    }
    if (paired.open &&
        !(kind == lane::frame_kind::pull && h.target == paired.target && h.id == paired.id + 1))
      c->release_pair(paired.id);  // not the pull of the push before: it is answered alone
    paired.open = pass_to_bucket(*c, *directory_, config_.timeout, h, std::move(w)) && h.paired;
    paired.id = h.id;
    paired.target = h.target;
  }
  c->close();
  disconnect(c->companion);
  c->writer.join();
  c->finished = true;
}

void lane_listener::forget_finished() {
  std::lock_guard<std::mutex> lock{mutex_};
  for (auto i = connections_.begin(); i != connections_.end();) {
    if ((*i)->finished) {
      (*i)->reader.join();
      i = connections_.erase(i);
    } else {
      ++i;
    }
  }
}

}  // namespace troupe
