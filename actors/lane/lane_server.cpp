#include "actors/lane/lane_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <caf/event_based_actor.hpp>

#include <condition_variable>
#include <deque>
#include <unordered_map>

#include "actors/lane/lane_socket.hpp"
#include "troupe/error.hpp"

namespace troupe {

// One accepted lane: its socket, its reader and writer threads, the answers waiting to be
// written, and how many frames its session still owes an answer (the reader waits while that
// reaches max_frames_in_flight, so the outbox holds at most that many).
struct lane_listener::connection {
  struct outgoing {
    lane::frame_header header;
    wire_bytes payload;
  };

  explicit connection(int fd) : socket(fd) {}
  lane::socket_fd socket;
  std::thread reader;
  std::thread writer;
  std::atomic<bool> finished{false};
  std::mutex mutex;
  std::condition_variable answered;
  std::condition_variable has_output;
  std::deque<outgoing> outbox;
  int in_flight = 0;
  bool closed = false;

  // Waits (at most `timeout`) for room for one more frame; false when closed or still full.
  bool reserve(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock{mutex};
    if (!answered.wait_for(lock, timeout,
                           [&] { return closed || in_flight < max_frames_in_flight; }))
      return false;
    if (closed) return false;
    ++in_flight;
    return true;
  }
  // Queues the answer to a reserved frame for the writer thread.
  void post(outgoing answer) {
    {
      std::lock_guard<std::mutex> lock{mutex};
      if (closed) return;
      outbox.push_back(std::move(answer));
    }
    has_output.notify_one();
  }
  // The writer thread: writes the answers in the order posted, each giving its frame's room
  // back; a failed write ends the connection.
  void write_answers() {
    lane::name_thread("lane.writer");
    for (;;) {
      outgoing next;
      {
        std::unique_lock<std::mutex> lock{mutex};
        has_output.wait(lock, [&] { return closed || !outbox.empty(); });
        if (closed) return;
        next = std::move(outbox.front());
        outbox.pop_front();
      }
      if (lane::write_frame(socket, next.header, next.payload.data())) return close();
      {
        std::lock_guard<std::mutex> lock{mutex};
        --in_flight;
      }
      answered.notify_one();
    }
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock{mutex};
      closed = true;
    }
    answered.notify_all();
    has_output.notify_all();
    socket.shutdown();
  }
};

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

// Posts one answer; the writer thread writes it and gives its frame's room back.
void answer(lane_listener::connection& c, uint64_t id, lane::frame_kind kind, wire_bytes payload) {
  lane::frame_header h;
  h.kind = static_cast<uint8_t>(kind);
  h.id = id;
  h.size = payload.size();
  c.post({h, std::move(payload)});
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

// The frames a session has passed to a bucket and not yet answered, each with its deadline.
struct session_state {
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> waiting;
  bool sweep_scheduled = false;
};

using session_ptr = caf::stateful_actor<session_state>*;

// One timer per session, not one per frame: every lane::sweep_period, frames past their
// deadline are answered `gone`.
void schedule_sweep(session_ptr self, std::chrono::milliseconds timeout) {
  if (self->state.sweep_scheduled || self->state.waiting.empty()) return;
  self->state.sweep_scheduled = true;
  self->delayed_send(self, lane::sweep_period(timeout), tick_atom_v);
}

void sweep(session_ptr self, lane_listener::connection& c, std::chrono::milliseconds timeout) {
  auto& waiting = self->state.waiting;
  self->state.sweep_scheduled = false;
  const auto now = std::chrono::steady_clock::now();
  for (auto i = waiting.begin(); i != waiting.end();) {
    if (i->second > now) {
      ++i;
      continue;
    }
    const std::string why = "the bucket did not answer in time";
    answer(c, i->first, lane::frame_kind::gone, why);
    i = waiting.erase(i);
  }
  schedule_sweep(self, timeout);
}

// True once for frame `id`: its answer is still owed (not swept).
bool owed(session_ptr self, uint64_t id) {
  return self->state.waiting.erase(id) > 0;
}

// The session of one connection: asks the buckets its frames name and posts their answers to
// the connection's writer thread. A scheduled actor: it never blocks (a write that waits for a
// stopped or slow client waits on the writer thread), and it and the buckets hand messages to
// each other on the node's scheduler threads rather than waking a thread of its own.
caf::behavior lane_session(session_ptr self, connection_ptr c,
                           std::shared_ptr<const lane_directory> directory,
                           std::chrono::milliseconds timeout) {
  self->attach_functor([c] { c->close(); });
  return {
      [=](lane_atom, uint64_t id, uint32_t kind, uint64_t target, wire& w) {
        const auto bucket = directory->find(target);
        if (!bucket) {
          const std::string why = "no bucket " + std::to_string(target) + " on this node";
          return answer(*c, id, lane::frame_kind::gone, why);
        }
        if (!self->state.waiting.emplace(id, std::chrono::steady_clock::now() + timeout).second) {
          const std::string why = "a frame number already in flight";
          return answer(*c, id, lane::frame_kind::gone, why);
        }
        schedule_sweep(self, timeout);
        auto reply = [=](wire& r) {
          if (!owed(self, id)) return;
          wire out = r.bytes.empty() && r.local ? encoded(r) : std::move(r);
          answer(*c, id, lane::frame_kind::reply, std::move(out.bytes));
        };
        auto refuse = [=](caf::error& err) {
          if (owed(self, id)) answer_error(*c, id, err);
        };
        // No CAF timer per frame: the sweep bounds the wait, and a bucket that ends answers
        // what is in its mailbox with an error.
        if (kind == static_cast<uint32_t>(lane::frame_kind::push))
          self->request(bucket, caf::infinite, push_atom_v, std::move(w)).then(reply, refuse);
        else
          self->request(bucket, caf::infinite, pull_atom_v, std::move(w)).then(reply, refuse);
      },
      [=](tick_atom) { sweep(self, *c, timeout); },
      [=](broken_atom) { self->quit(); },
  };
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
      if (fd >= 0) admit(fd);
    }
  }
}

void lane_listener::admit(int fd) {
  forget_finished();
  std::lock_guard<std::mutex> lock{mutex_};
  if (connections_.size() >= max_connections) {
    config_.log.warn("data lane: {} connections open; refusing another", connections_.size());
    ::close(fd);
    return;
  }
  auto c = std::make_shared<connection>(fd);
  c->reader = std::thread([this, c] { serve(c); });
  connections_.push_back(std::move(c));
}

// The reader thread of one connection: the handshake, then frames until either side ends it.
void lane_listener::serve(connection_ptr c) {
  lane::name_thread("lane.reader");
  lane::tune(c->socket.get(), config_.timeout);
  if (auto err = lane::accept_lane(c->socket, config_.secret, to_string(sys_.node()), local_name_,
                                   config_.timeout)) {
    config_.log.warn("data lane: a client was refused: {}", describe(err));
    c->finished = true;
    return;
  }
  c->writer = std::thread([c] { c->write_answers(); });
  auto session = sys_.spawn(lane_session, c, std::shared_ptr<const lane_directory>{directory_},
                            config_.timeout);
  for (;;) {
    lane::frame_header h;
    wire w;
    if (!c->reserve(2 * config_.timeout)) break;
    if (auto err = lane::read_frame(c->socket, config_.timeout, h, w.bytes)) {
      if (!has_code(err, errc::io_failure)) config_.log.warn("data lane: {}", describe(err));
      break;
    }
    const auto kind = static_cast<lane::frame_kind>(h.kind);
    if (kind != lane::frame_kind::push && kind != lane::frame_kind::pull) {
      config_.log.warn("data lane: a client sent an answer frame");
      break;
    }
    caf::anon_send(session, lane_atom_v, h.id, uint32_t{h.kind}, h.target, std::move(w));
  }
  c->close();
  caf::anon_send(session, broken_atom_v);
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
