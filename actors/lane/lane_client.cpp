#include "actors/lane/lane_client.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include <thread>
#include <unordered_map>

#include "actors/lane/lane_socket.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

constexpr size_t max_pending = 4096;  // requests in flight on one lane

// The client's socket and reader thread; close() ends the reader and waits for it.
struct client_io {
  explicit client_io(int fd) : socket(fd) {}
  ~client_io() {
    if (reader.joinable()) reader.detach();  // only when the reader itself held the last copy
  }
  lane::socket_fd socket;
  std::thread reader;
  void close() {
    socket.shutdown();
    if (reader.joinable() && reader.get_id() != std::this_thread::get_id()) reader.join();
  }
};

// Hands every frame the server sends to the client actor, until the connection ends.
void read_answers(std::shared_ptr<client_io> io, caf::actor_addr client,
                  std::chrono::milliseconds timeout) {
  for (;;) {
    lane::frame_header h;
    wire w;
    if (lane::read_frame(io->socket, timeout, h, w.bytes)) break;
    auto to = caf::actor_cast<caf::actor>(client);
    if (!to) return;
    caf::anon_send(to, lane_atom_v, h.id, uint32_t{h.kind}, std::move(w));
  }
  if (auto to = caf::actor_cast<caf::actor>(client)) caf::anon_send(to, broken_atom_v);
}

// The error an answer frame stands for (a refusal is the bucket's own troupe error).
caf::error answer_error(lane::frame_kind kind, const wire& w) {
  if (kind == lane::frame_kind::refusal && !w.bytes.empty())
    return make_error(static_cast<errc>(static_cast<uint8_t>(w.bytes[0])),
                      std::string{w.bytes.begin() + 1, w.bytes.end()});
  // Not troupe's: the worker asks for the bucket's current handle and sends again.
  return caf::make_error(caf::sec::request_receiver_down,
                         "data lane: " + std::string{w.bytes.begin(), w.bytes.end()});
}

struct client_state {
  std::unordered_map<uint64_t, caf::response_promise> pending;
  uint64_t next_id = 0;
};

caf::behavior lane_client(caf::stateful_actor<client_state>* self, std::shared_ptr<client_io> io,
                          std::chrono::milliseconds timeout, caf::actor_addr owner) {
  io->reader = std::thread(read_answers, io, self->address(), timeout);
  self->attach_functor([io] { io->close(); });
  if (auto strong = caf::actor_cast<caf::actor>(owner)) self->monitor(strong);
  self->set_down_handler([=](caf::down_msg&) { self->quit(); });
  auto send = [=](uint64_t target, lane::frame_kind kind, wire& w) -> caf::response_promise {
    auto rp = self->make_response_promise();
    auto& st = self->state;
    if (st.pending.size() >= max_pending) {
      rp.deliver(make_error(errc::message_too_large, "data lane: too many requests in flight"));
      return rp;
    }
    const wire out = w.bytes.empty() && w.local ? encoded(w) : std::move(w);
    lane::frame_header h;
    h.kind = static_cast<uint8_t>(kind);
    h.id = ++st.next_id;
    h.target = target;
    h.size = out.bytes.size();
    if (auto err = lane::write_frame(io->socket, h, out.bytes.data())) {
      rp.deliver(caf::make_error(caf::sec::request_receiver_down, "data lane: " + describe(err)));
      io->socket.shutdown();  // the reader ends and says so
      return rp;
    }
    st.pending.emplace(h.id, rp);
    self->delayed_send(self, timeout, lane_atom_v, h.id);
    return rp;
  };
  return {
      [=](lane_atom, uint64_t target, push_atom, wire& w) {
        return send(target, lane::frame_kind::push, w);
      },
      [=](lane_atom, uint64_t target, pull_atom, wire& w) {
        return send(target, lane::frame_kind::pull, w);
      },
      [=](lane_atom, uint64_t id, uint32_t kind, wire& w) {
        auto i = self->state.pending.find(id);
        if (i == self->state.pending.end()) return;  // answered after its deadline
        auto rp = std::move(i->second);
        self->state.pending.erase(i);
        const auto k = static_cast<lane::frame_kind>(kind);
        if (k == lane::frame_kind::reply)
          rp.deliver(std::move(w));
        else
          rp.deliver(answer_error(k, w));
      },
      [=](lane_atom, uint64_t id) {  // the deadline of request `id`
        auto i = self->state.pending.find(id);
        if (i == self->state.pending.end()) return;
        i->second.deliver(caf::make_error(caf::sec::request_timeout, "data lane: no answer"));
        self->state.pending.erase(i);
      },
      [=](broken_atom) {
        for (auto& [id, rp] : self->state.pending)
          rp.deliver(
              caf::make_error(caf::sec::request_receiver_down, "data lane: connection lost"));
        self->state.pending.clear();
        self->quit();
      },
  };
}

}  // namespace

caf::expected<lane_handle> open_lane(caf::actor_system& sys, const std::string& host, uint16_t port,
                                     const std::string& secret, std::chrono::milliseconds timeout,
                                     caf::actor_addr owner) {
  auto connected = lane::connect_lane(host, port, secret, timeout);
  if (!connected) return std::move(connected.error());
  auto io = std::make_shared<client_io>(connected->first);
  // Detached: a write waits (up to the timeout) while a stopped or slow server does not read,
  // and must not hold one of the node's few scheduler threads (its heartbeats run there).
  auto client = sys.spawn<caf::detached>(lane_client, io, timeout, std::move(owner));
  return lane_handle{std::move(connected->second), std::move(client)};
}

caf::actor lane_map::find(const caf::node_id& node) const {
  if (by_node_.empty() || !node) return {};
  auto i = by_node_.find(to_string(node));
  return i == by_node_.end() ? caf::actor{} : i->second;
}

bool lane_map::forget(const caf::actor_addr& client) {
  for (auto i = by_node_.begin(); i != by_node_.end(); ++i)
    if (i->second.address() == client) {
      by_node_.erase(i);
      return true;
    }
  return false;
}

}  // namespace troupe
