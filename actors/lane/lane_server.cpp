#include "actors/lane/lane_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <caf/actor_companion.hpp>
#include <caf/mailbox_element.hpp>

#include <condition_variable>
#include <deque>
#include <optional>
#include <unordered_map>

#include "actors/lane/lane_socket.hpp"
#include "troupe/error.hpp"

namespace troupe {

// One accepted lane: its socket, its reader and writer threads, the companion actor its
// buckets answer, the frames it owes an answer (by the request id it gave each) and the answers
// waiting to be written. The reader waits while max_frames_in_flight frames are owed or
// unwritten, so the outbox holds at most that many.
struct lane_listener::connection {
  struct outgoing {
    lane::frame_header header;
    wire_bytes payload;
    size_t written = 0;  // bytes of it (header first) already on the socket
  };
  struct owed_frame {
    uint64_t frame = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  using clock = std::chrono::steady_clock;

  connection(int fd, bool local) : socket(fd), local(local) {}
  lane::socket_fd socket;
  const bool local;  // a same-host Unix socket: it shares rings (lane_ring.hpp)
  std::unique_ptr<lane::shared_ring> out_ring;  // answers' payloads (under mutex)
  std::unique_ptr<lane::shared_ring> in_ring;   // requests' payloads (the reader's)
  std::thread reader;
  std::thread writer;
  std::atomic<bool> finished{false};
  caf::actor companion;  // set by the reader before its first frame
  std::mutex mutex;
  std::condition_variable answered;
  std::condition_variable has_output;
  std::deque<outgoing> outbox;
  std::unordered_map<uint64_t, owed_frame> owed;
  int in_flight = 0;
  bool closed = false;
  // A thread is writing to the socket (the writer, or post() writing through).
  bool writing = false;

  // Waits (at most `timeout`) for room for one more frame, answering late frames `gone` every
  // `period` meanwhile; false when closed or still full.
  bool reserve(std::chrono::milliseconds timeout, std::chrono::milliseconds period) {
    const auto deadline = clock::now() + timeout;
    std::unique_lock<std::mutex> lock{mutex};
    while (!answered.wait_for(lock, period,
                              [&] { return closed || in_flight < max_frames_in_flight; })) {
      if (clock::now() >= deadline) return false;
      sweep_locked();
    }
    if (closed) return false;
    ++in_flight;
    return true;
  }
  // Frame `frame`, passed to a bucket as `request`, is owed an answer by `deadline`; false
  // (nothing owed) when that frame number is already owed one (at most 64 are).
  bool owe(uint64_t request, uint64_t frame, clock::time_point deadline) {
    std::lock_guard<std::mutex> lock{mutex};
    for (const auto& [r, f] : owed)
      if (f.frame == frame) return false;
    owed[request] = owed_frame{frame, deadline};
    return true;
  }
  // The frame that `request` answers, once (none when it was swept or never owed).
  std::optional<uint64_t> settle(uint64_t request) {
    std::lock_guard<std::mutex> lock{mutex};
    auto i = owed.find(request);
    if (i == owed.end()) return std::nullopt;
    const uint64_t frame = i->second.frame;
    owed.erase(i);
    return frame;
  }
  void sweep() {
    std::lock_guard<std::mutex> lock{mutex};
    sweep_locked();
  }
  // The answer to a reserved frame. When nothing else is being written or waits, the posting
  // thread (a bucket's, through the companion) writes what the socket takes at once: no hop to
  // the writer thread, which was a wake-up and a context switch per answer. What does not fit
  // now, and every answer behind another, goes to the writer thread, in order.
  void post(outgoing answer) {
    std::unique_lock<std::mutex> lock{mutex};
    if (closed) return;
    to_ring(answer);  // in the order the answers reach the socket, as the client takes them
    if (writing || !outbox.empty()) {
      outbox.push_back(std::move(answer));
      lock.unlock();
      has_output.notify_one();
      return;
    }
    writing = true;
    lock.unlock();
    const auto written = write(answer, false);
    lock.lock();
    writing = false;
    if (!written) {
      lock.unlock();
      return close();
    }
    if (*written == sizeof(lane::frame_header) + answer.payload.size()) {
      --in_flight;
      const bool more = !outbox.empty();
      lock.unlock();
      answered.notify_one();
      if (more) has_output.notify_one();
      return;
    }
    answer.written = *written;  // the rest goes first: nothing else was written meanwhile
    outbox.push_front(std::move(answer));
    lock.unlock();
    has_output.notify_one();
  }
  // The writer thread: writes the answers in the order posted (waiting, as long as the socket's
  // send timeout, for a slow reader), each giving its frame's room back; a failed write ends
  // the connection.
  void write_answers() {
    lane::name_thread("lane.writer");
    for (;;) {
      outgoing next;
      {
        std::unique_lock<std::mutex> lock{mutex};
        has_output.wait(lock, [&] { return closed || (!outbox.empty() && !writing); });
        if (closed) return;
        next = std::move(outbox.front());
        outbox.pop_front();
        writing = true;
      }
      if (!write(next, true)) return close();
      {
        std::lock_guard<std::mutex> lock{mutex};
        writing = false;
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

 private:
  // Moves a large answer's payload into the shared ring, when there is one and it has room.
  void to_ring(outgoing& answer) {
    const size_t size = answer.payload.size();
    if (!out_ring || size < lane::ring_min_payload) return;
    const std::span<const char> whole{answer.payload.data(), size};
    if (!out_ring->put(byte_parts{&whole, 1}, size)) return;
    answer.header.in_ring = 1;
    answer.payload = wire_bytes{};
  }
  // Writes `answer` on from where it stopped: all of it with `wait`, or what the socket takes
  // at once. Returns how far it got (lane::write_frame_from).
  caf::expected<size_t> write(const outgoing& answer, bool wait) {
    const std::span<const char> payload{answer.payload.data(), answer.payload.size()};
    return lane::write_frame_from(socket, answer.header,
                                  byte_parts{&payload, payload.empty() ? 0u : 1u}, answer.written,
                                  wait);
  }
  // Answers `gone` every owed frame past its deadline (a bucket that never answers).
  void sweep_locked() {
    const auto now = clock::now();
    bool posted = false;
    for (auto i = owed.begin(); i != owed.end();) {
      if (i->second.deadline > now || closed) {
        ++i;
        continue;
      }
      const std::string why = "the bucket did not answer in time";
      outbox.push_back({gone_header(i->second.frame, why.size()), {why.begin(), why.end()}});
      posted = true;
      i = owed.erase(i);
    }
    if (posted) has_output.notify_one();
  }
  static lane::frame_header gone_header(uint64_t frame, size_t size) {
    lane::frame_header h;
    h.kind = static_cast<uint8_t>(lane::frame_kind::gone);
    h.id = frame;
    h.size = size;
    return h;
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
    return answer(c, *frame, lane::frame_kind::reply, std::move(out.bytes));
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
  auto* companion =
      static_cast<caf::local_actor*>(caf::actor_cast<caf::abstract_actor*>(c->companion));
  const auto from = caf::actor_cast<caf::strong_actor_ptr>(c->companion);
  const auto period = lane::sweep_period(config_.timeout);
  c->writer = std::thread([c] { c->write_answers(); });
  auto last_sweep = std::chrono::steady_clock::now();
  for (;;) {
    if (!c->reserve(2 * config_.timeout, period)) break;
    auto ready = lane::readable(c->socket, period);
    for (;;) {  // late frames are answered every period, busy or quiet
      const auto now = std::chrono::steady_clock::now();
      if (now - last_sweep >= period) {
        c->sweep();
        last_sweep = now;
      }
      if (!ready || *ready) break;
      ready = lane::readable(c->socket, period);
    }
    lane::frame_header h;
    wire w;
    if (!ready) break;
    if (auto err = lane::read_frame(c->socket, config_.timeout, h, w.bytes, c->in_ring.get())) {
      if (!has_code(err, errc::io_failure)) config_.log.warn("data lane: {}", describe(err));
      break;
    }
    const auto kind = static_cast<lane::frame_kind>(h.kind);
    if (kind != lane::frame_kind::push && kind != lane::frame_kind::pull) {
      config_.log.warn("data lane: a client sent an answer frame");
      break;
    }
    const auto bucket = directory_->find(h.target);
    if (!bucket) {
      answer(*c, h.id, lane::frame_kind::gone,
             "no bucket " + std::to_string(h.target) + " on this node");
      continue;
    }
    const auto id = companion->new_request_id(caf::message_priority::normal);
    if (!c->owe(id.request_id().integer_value(), h.id,
                std::chrono::steady_clock::now() + config_.timeout)) {
      answer(*c, h.id, lane::frame_kind::gone, std::string{"a frame number already in flight"});
      continue;
    }
    auto msg = kind == lane::frame_kind::push ? caf::make_message(push_atom_v, std::move(w))
                                              : caf::make_message(pull_atom_v, std::move(w));
    // A bucket that has ended answers the request with an error (CAF bounces it).
    caf::actor_cast<caf::abstract_actor*>(bucket)->enqueue(from, id, std::move(msg), nullptr);
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
