#include "actors/transport/lane_client.hpp"
#include "actors/transport/lane_socket.hpp"

#include <unistd.h>

#include "troupe/error.hpp"

namespace troupe {

namespace {

constexpr size_t max_pending = 4096;      // requests in flight on one lane
constexpr size_t max_read_together = 16;  // answers read before the first is delivered

// Not troupe's error: the worker asks for the bucket's current handle and sends again.
caf::message gone(caf::sec code, const std::string& why) {
  return caf::make_message(caf::make_error(code, "data lane: " + why));
}

// The response an answer frame stands for: the bucket's reply, its troupe error (a refusal),
// or a bucket gone.
caf::message answer_of(lane::frame_kind kind, wire w) {
  if (kind == lane::frame_kind::reply) return caf::make_message(std::move(w));
  const auto text = bytes_of(w);
  if (kind == lane::frame_kind::refusal && !text.empty())
    return caf::make_message(make_error(static_cast<errc>(static_cast<uint8_t>(text[0])),
                                        std::string{text.begin() + 1, text.end()}));
  return gone(caf::sec::request_receiver_down, std::string{text.begin(), text.end()});
}

void respond(const caf::actor_addr& requester, caf::message_id response_id, caf::message msg) {
  if (auto to = caf::actor_cast<caf::strong_actor_ptr>(requester))
    to->enqueue(nullptr, response_id, std::move(msg), nullptr);
}

}  // namespace

caf::expected<std::shared_ptr<lane_link>> lane_link::open(const std::string& host, uint16_t port,
                                                          const std::string& secret,
                                                          std::chrono::milliseconds timeout,
                                                          bool same_host) {
  auto tcp = lane::connect_lane(host, port, secret, timeout);
  if (!tcp) return std::move(tcp.error());
  if (same_host && !tcp->local_name.empty()) {
    auto local = lane::connect_local(tcp->local_name, secret, timeout);
    if (local && local->node == tcp->node) {
      ::close(tcp->fd);
      return std::make_shared<lane_link>(local->fd, std::move(local->node), timeout, true,
                                         std::move(local->rings));
    }
    if (local) ::close(local->fd);  // another node answered that name: stay on TCP
  }
  return std::make_shared<lane_link>(tcp->fd, std::move(tcp->node), timeout, false);
}

lane_link::lane_link(int fd, std::string node, std::chrono::milliseconds timeout, bool local,
                     lane::ring_pair rings)
    : socket_(fd),
      node_(std::move(node)),
      timeout_(timeout),
      local_(local),
      out_(std::move(rings.out)),
      in_(std::move(rings.in)) {
  reader_ = std::thread([this] { read_answers(); });
}

lane_link::~lane_link() {
  socket_.shutdown();
  if (reader_.joinable()) reader_.join();
}

caf::message_id lane_link::pull(caf::local_actor* self, const bucket_actor& target,
                                const pull_request& request) {
  const auto id = self->new_request_id(caf::message_priority::normal);
  const wire w = encode(request);
  const std::span<const char> whole{w.bytes.data(), w.bytes.size()};
  const request_frame one{id, lane::frame_kind::pull, byte_parts{&whole, 1}};
  write_requests(self->ctrl(), target.id(), {&one, 1}, false);
  return id.response_id();
}

caf::message_id lane_link::push(caf::local_actor* self, const bucket_actor& target,
                                const push_request& push, const gradient_views& grad,
                                size_t& bytes) {
  const auto id = self->new_request_id(caf::message_priority::normal);
  bytes = write_push(push, grad, [&](byte_parts parts) {
    const request_frame one{id, lane::frame_kind::push, parts};
    write_requests(self->ctrl(), target.id(), {&one, 1}, false);
  });
  return id.response_id();
}

std::pair<caf::message_id, caf::message_id> lane_link::push_then_pull(
    caf::local_actor* self, const bucket_actor& target, const push_request& push,
    const gradient_views& grad, const pull_request& request, size_t& bytes) {
  const auto push_id = self->new_request_id(caf::message_priority::normal);
  const auto pull_id = self->new_request_id(caf::message_priority::normal);
  const wire pull_bytes = encode(request);
  const std::span<const char> whole{pull_bytes.bytes.data(), pull_bytes.bytes.size()};
  bytes = write_push(push, grad, [&](byte_parts parts) {
    const request_frame both[2] = {{push_id, lane::frame_kind::push, parts},
                                   {pull_id, lane::frame_kind::pull, byte_parts{&whole, 1}}};
    write_requests(self->ctrl(), target.id(), both, true);
  });
  return {push_id.response_id(), pull_id.response_id()};
}

void lane_link::send(const caf::strong_actor_ptr& requester, caf::message_id request_id,
                     lane::frame_kind kind, uint64_t target, byte_parts payload) {
  const request_frame one{request_id, kind, payload};
  write_requests(requester, target, {&one, 1}, false);
}

size_t lane_link::write_push(const push_request& push, const gradient_views& grad,
                             const std::function<void(byte_parts)>& write) {
  const encode_options storage{push.storage};
  if (grad) return encode_to(push, *grad, write, storage);
  const wire w = encode(push, storage);
  const std::span<const char> whole{w.bytes.data(), w.bytes.size()};
  write(byte_parts{&whole, 1});
  return w.bytes.size();
}

void lane_link::write_requests(const caf::strong_actor_ptr& requester, uint64_t target,
                               std::span<const request_frame> requests, bool paired) {
  const auto from = caf::actor_cast<caf::actor_addr>(requester);
  std::vector<lane::frame_out> frames(requests.size());
  {
    std::lock_guard<std::mutex> lock{mutex_};
    const bool full = pending_.size() + requests.size() > max_pending;
    if (broken_ || full) {
      for (const auto& r : requests)
        respond(from, r.id.response_id(),
                broken_ ? gone(caf::sec::request_receiver_down, "connection lost")
                        : caf::make_message(make_error(errc::message_too_large,
                                                       "data lane: too many requests in flight")));
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (size_t i = 0; i < requests.size(); ++i) {  // consecutive numbers: a pair's are id, id + 1
      frames[i].header.id = ++next_frame_;
      pending_.emplace(frames[i].header.id, waiting{from, requests[i].id.response_id(), deadline});
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    auto& h = frames[i].header;
    h.kind = static_cast<uint8_t>(requests[i].kind);
    h.target = target;
    h.size = 0;
    for (const auto& p : requests[i].payload) h.size += p.size();
    frames[i].payload = requests[i].payload;
  }
  frames.front().header.paired = paired ? 1 : 0;
  std::lock_guard<std::mutex> lock{write_mutex_};
  for (auto& f : frames)
    if (out_ && f.header.size >= lane::ring_min_payload && out_->put(f.payload, f.header.size)) {
      f.header.in_ring = 1;
      ++ring_frames_;
    }
  // A failed write ends the connection; the reader then fails these requests with the rest.
  if (!lane::write_frames_from(socket_, frames, 0, true)) socket_.shutdown();
}

void lane_link::deliver(uint64_t frame, caf::message msg) {
  waiting to;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    auto i = pending_.find(frame);
    if (i == pending_.end()) return;  // answered after its deadline
    to = std::move(i->second);
    pending_.erase(i);
  }
  respond(to.requester, to.response_id, std::move(msg));
}

void lane_link::sweep() {
  std::vector<waiting> late;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    const auto now = std::chrono::steady_clock::now();
    for (auto i = pending_.begin(); i != pending_.end();) {
      if (i->second.deadline > now) {
        ++i;
        continue;
      }
      late.push_back(std::move(i->second));
      i = pending_.erase(i);
    }
  }
  for (auto& w : late)
    respond(w.requester, w.response_id, gone(caf::sec::request_timeout, "no answer"));
}

void lane_link::fail_all(const std::string& why) {
  std::unordered_map<uint64_t, waiting> all;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    broken_ = true;
    all.swap(pending_);
  }
  for (auto& [frame, w] : all)
    respond(w.requester, w.response_id, gone(caf::sec::request_receiver_down, why));
}

// The reader thread: hands each answer to its requester, checks deadlines whenever the socket
// is quiet for a sweep period, and fails what is in flight once the connection ends.
void lane_link::read_answers() {
  lane::name_thread("lane.answers");
  const auto period = lane::sweep_period(timeout_);
  auto last_sweep = std::chrono::steady_clock::now();
  std::vector<std::pair<uint64_t, caf::message>> arrived;  // by frame number
  lane::frame_reader frames{socket_};
  auto more_now = [&] {
    auto more = frames.readable(std::chrono::milliseconds(0));
    return more && *more;
  };
  for (;;) {
    auto ready = frames.readable(period);
    if (!ready) break;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep >= period) {
      sweep();
      last_sweep = now;
    }
    if (!*ready) continue;
    // What is on the socket already is read before any of it is delivered, so that a requester
    // wakes once for answers that came together (a pair's: the push's ack and the values).
    bool ended = false;
    do {
      lane::frame_header h;
      wire w;
      // A payload in the ring is lent to the requester, who decodes it where it is.
      ended = static_cast<bool>(frames.read(timeout_, h, w.bytes, in_.get(), &w.borrowed));
      const auto kind = static_cast<lane::frame_kind>(h.kind);
      ended = ended || kind == lane::frame_kind::push || kind == lane::frame_kind::pull;
      if (ended) break;  // the connection failed, or the server sent something not an answer
      if (h.in_ring) ++ring_frames_;
      arrived.emplace_back(h.id, answer_of(kind, std::move(w)));
    } while (arrived.size() < max_read_together && more_now());
    for (auto& [frame, answer] : arrived) deliver(frame, std::move(answer));
    arrived.clear();
    if (ended) break;
  }
  socket_.shutdown();
  fail_all("connection lost");
}

bool lane_map::open(const std::string& host, uint16_t port, const std::string& secret,
                    std::chrono::milliseconds timeout, const logger& log,
                    const std::string& whose) {
  auto link = lane_link::open(host, port, secret, timeout);
  if (!link) {
    log.warn("no data lane to {}:{} ({}); {} go over CAF", host, port, describe(link.error()),
             whose);
    return false;
  }
  log.debug("data lane to {}:{}", host, port);
  add(std::move(*link));
  return true;
}

std::shared_ptr<lane_link> lane_map::find(const caf::node_id& node) const {
  if (by_node_.empty() || !node) return nullptr;
  auto i = by_node_.find(to_string(node));
  if (i == by_node_.end() || i->second->broken()) return nullptr;
  return i->second;
}

}  // namespace troupe
