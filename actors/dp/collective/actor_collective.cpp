#include "actors/dp/collective/actor_collective.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/stateful_actor.hpp>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "actors/supervision/failure/awake_clock.hpp"
#include "messages/protocol.hpp"
#include "troupe/error.hpp"
#include "troupe/net.hpp"

namespace troupe {

namespace {

constexpr size_t chunk_values = size_t{1} << 18;        // 1 MiB of fp32 per message
constexpr size_t max_queued_bytes = size_t{256} << 20;  // what the inbox holds at most

// A chunk that arrived: its header and its values' raw fp32 bytes.
struct arrived_chunk {
  collective_chunk header;
  wire_bytes bytes;
};

// Chunks that arrived, per sender in arrival order (CAF keeps one sender's order), bounded.
class chunk_queue {
 public:
  explicit chunk_queue(uint32_t senders) : from_(senders), gone_(senders) {}

  void push(arrived_chunk c) {
    std::lock_guard<std::mutex> guard{mutex_};
    const size_t bytes = c.bytes.size();
    if (queued_ + bytes > max_queued_bytes) {
      overflowed_ = true;
    } else {
      queued_ += bytes;
      from_[c.header.from].push_back(std::move(c));
    }
    changed_.notify_all();
  }

  // Member `from`'s inbox went away (its process died, or its group was closed after a
  // failure): waiting for more of its data fails at once, as Gloo's waits do on a reset
  // connection. What it sent before is still delivered.
  void abort(uint32_t from, std::string why) {
    std::lock_guard<std::mutex> guard{mutex_};
    if (from < gone_.size() && gone_[from].empty()) gone_[from] = std::move(why);
    changed_.notify_all();
  }

  // The next chunk from `from`, waiting until `deadline` (awake time: a pause of this process
  // does not count as the member's silence).
  caf::expected<arrived_chunk> pop(uint32_t from, awake_deadline& deadline) {
    std::unique_lock<std::mutex> lock{mutex_};
    auto ready = [&] { return overflowed_ || !from_[from].empty() || !gone_[from].empty(); };
    while (!ready()) {
      if (deadline.passed())
        return make_error(errc::timeout, "actors: no data from member " + std::to_string(from));
      changed_.wait_for(lock, deadline.step(), ready);
    }
    if (overflowed_) return make_error(errc::collective_failed, "actors: the inbox overflowed");
    if (from_[from].empty())
      return make_error(errc::collective_failed, "actors: member " + std::to_string(from) +
                                                     " is gone (" + gone_[from] + ")");
    arrived_chunk c = std::move(from_[from].front());
    from_[from].pop_front();
    queued_ -= c.bytes.size();
    return c;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::deque<arrived_chunk>> from_;
  size_t queued_ = 0;
  bool overflowed_ = false;
  std::vector<std::string> gone_;  // per member: why its inbox went away
};

// Receives the chunks of one generation of one group; anything else is dropped. It also
// watches the other members' inboxes (told by its own member, `peer`) and aborts the waits
// when one goes.
caf::behavior inbox(caf::stateful_actor<std::map<caf::actor_addr, uint32_t>>* self,
                    std::shared_ptr<chunk_queue> queue, actor_collective_options o) {
  self->set_down_handler([=](caf::down_msg& msg) {
    if (auto it = self->state.find(msg.source); it != self->state.end())
      queue->abort(it->second, self->system().render(msg.reason));
  });
  return {
      [=](chunk_atom, const wire& header, wire& values) {
        auto chunk = decode<collective_chunk>(header);
        if (!chunk || chunk->generation != o.generation || chunk->key != o.key ||
            chunk->from >= o.size || chunk->count == 0 || chunk->count > chunk_values ||
            values.bytes.size() != chunk->count * sizeof(float))
          return;
        queue->push(arrived_chunk{*chunk, std::move(values.bytes)});
      },
      [=](peer_atom, uint64_t key, uint32_t rank, const caf::actor& peer) {
        if (key != o.key || rank >= o.size) return;
        self->state[peer.address()] = rank;
        self->monitor(peer);
      },
  };
}

class actor_collective : public collective {
 public:
  actor_collective(caf::actor_system& sys, actor_collective_options o,
                   std::shared_ptr<chunk_queue> queue, caf::actor inbox, uint16_t port,
                   std::vector<caf::actor> peers)
      : sys_(sys),
        o_(std::move(o)),
        queue_(std::move(queue)),
        inbox_(std::move(inbox)),
        port_(port),
        peers_(std::move(peers)) {}

  ~actor_collective() override {
    net::unpublish(sys_, inbox_.address(), port_);
    caf::anon_send_exit(inbox_, caf::exit_reason::user_shutdown);
  }

  uint32_t rank() const override { return o_.rank; }
  uint32_t size() const override { return o_.size; }
  std::string backend() const override { return "actors"; }

  caf::error allreduce(std::span<float> data, const collective_call& call) override {
    if (data.empty() || size() == 1) return {};
    const size_t n = size();
    padded_.assign((data.size() + n - 1) / n * n, 0.0f);
    std::copy(data.begin(), data.end(), padded_.begin());
    if (auto err = ring_reduce_scatter(padded_, call)) return err;
    if (auto err = ring_all_gather(padded_, call)) return err;
    std::copy(padded_.begin(), padded_.begin() + data.size(), data.begin());
    return {};
  }

  caf::error reduce_scatter(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    if (data.empty() || size() == 1) return {};
    return ring_reduce_scatter(data, call);
  }

  caf::error all_gather(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    if (data.empty() || size() == 1) return {};
    return ring_all_gather(data, call);
  }

  caf::error broadcast(std::span<float> data, uint32_t root, const collective_call& call) override {
    if (root >= size()) return make_error(errc::bad_configuration, "broadcast: no such root");
    if (data.empty() || size() == 1) return {};
    awake_deadline deadline{call.timeout};
    if (rank() != root) return receive(root, call.tag, data, false, deadline);
    for (uint32_t j = 0; j < size(); ++j)
      if (j != rank()) send(j, call.tag, data);
    return {};
  }

  caf::error all_to_all(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    if (data.empty() || size() == 1) return {};
    const size_t each = data.size() / size();
    awake_deadline deadline{call.timeout};
    for (uint32_t j = 0; j < size(); ++j)
      if (j != rank()) send(j, call.tag, data.subspan(j * each, each));
    for (uint32_t j = 0; j < size(); ++j)
      if (j != rank())
        if (auto err = receive(j, call.tag, data.subspan(j * each, each), false, deadline))
          return err;
    return {};
  }

  caf::error barrier(const collective_call& call) override {
    std::vector<float> one(size(), 1.0f);
    return allreduce(one, call);
  }

 private:
  uint32_t next() const { return (o_.rank + 1) % o_.size; }
  uint32_t previous() const { return (o_.rank + o_.size - 1) % o_.size; }

  std::span<float> shard(std::span<float> data, size_t i) const {
    const size_t each = data.size() / size();
    return data.subspan(i * each, each);
  }

  // n - 1 steps: send shard (r - k - 1) on, add shard (r - k - 2) from behind; afterwards
  // shard r holds the sum, computed here alone.
  caf::error ring_reduce_scatter(std::span<float> data, const collective_call& call) {
    const size_t n = size(), r = rank();
    awake_deadline deadline{call.timeout};
    for (size_t k = 0; k + 1 < n; ++k) {
      send(next(), call.tag, shard(data, (r + 2 * n - k - 1) % n));
      if (auto err =
              receive(previous(), call.tag, shard(data, (r + 2 * n - k - 2) % n), true, deadline))
        return err;
    }
    return {};
  }

  // n - 1 steps: send shard (r - k) on, take shard (r - k - 1) from behind.
  caf::error ring_all_gather(std::span<float> data, const collective_call& call) {
    const size_t n = size(), r = rank();
    awake_deadline deadline{call.timeout};
    for (size_t k = 0; k + 1 < n; ++k) {
      send(next(), call.tag, shard(data, (r + n - k) % n));
      if (auto err =
              receive(previous(), call.tag, shard(data, (r + 2 * n - k - 1) % n), false, deadline))
        return err;
    }
    return {};
  }

  void send(uint32_t to, uint32_t tag, std::span<const float> part) {
    for (size_t at = 0; at < part.size(); at += chunk_values) {
      const size_t n = std::min(chunk_values, part.size() - at);
      const collective_chunk c{o_.generation, o_.key, o_.rank, tag, at, part.size(), n};
      const auto* bytes = reinterpret_cast<const char*>(part.data() + at);
      caf::anon_send(peers_[to], chunk_atom_v, encode(c),
                     wire{wire_bytes(bytes, bytes + n * sizeof(float))});
    }
  }

  // Fills (or adds into) `part` from `from`'s chunks of call `tag`, in order.
  caf::error receive(uint32_t from, uint32_t tag, std::span<float> part, bool add,
                     awake_deadline& deadline) {
    for (size_t at = 0; at < part.size();) {
      auto c = queue_->pop(from, deadline);
      if (!c) return std::move(c.error());
      const auto& h = c->header;
      if (h.tag != tag || h.offset != at || h.total != part.size())
        return make_error(errc::collective_failed,
                          "actors: member " + std::to_string(from) + " sent another call's data");
      float* out = part.data() + at;
      const char* in = c->bytes.data();
      if (add)
        for (size_t i = 0; i < h.count; ++i) {
          float v;
          std::memcpy(&v, in + i * sizeof(float), sizeof v);
          out[i] += v;
        }
      else
        std::memcpy(out, in, h.count * sizeof(float));
      at += h.count;
    }
    return {};
  }

  caf::actor_system& sys_;
  actor_collective_options o_;
  std::shared_ptr<chunk_queue> queue_;
  caf::actor inbox_;
  uint16_t port_;
  std::vector<caf::actor> peers_;  // [rank]: that member's inbox (ours at our rank)
  std::vector<float> padded_;
};

caf::expected<std::pair<std::string, uint16_t>> parse_address(const std::vector<char>& value) {
  const std::string text(value.begin(), value.end());
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return make_error(errc::malformed_message, "actors: bad address");
  const long port = std::strtol(text.c_str() + colon + 1, nullptr, 10);
  if (port <= 0 || port > 65535) return make_error(errc::malformed_message, "actors: bad port");
  return std::pair{text.substr(0, colon), static_cast<uint16_t>(port)};
}

}  // namespace

caf::expected<std::unique_ptr<collective>> make_actor_collective(
    caf::actor_system& sys, rendezvous_store& store, const actor_collective_options& o) {
  if (o.size == 0 || o.rank >= o.size)
    return make_error(errc::bad_configuration,
                      "actors: rank " + std::to_string(o.rank) + " of " + std::to_string(o.size));
  auto queue = std::make_shared<chunk_queue>(o.size);
  auto box = sys.spawn(inbox, queue, o);
  auto port = net::publish(box, 0, o.bind_host);
  if (!port) {
    caf::anon_send_exit(box, caf::exit_reason::user_shutdown);
    return make_error(errc::io_failure,
                      "actors: cannot listen on " + o.bind_host + ": " + sys.render(port.error()));
  }
  std::vector<caf::actor> peers(o.size);
  peers[o.rank] = box;
  auto give_up = [&](caf::error err) {
    net::unpublish(sys, box.address(), *port);
    caf::anon_send_exit(box, caf::exit_reason::user_shutdown);
    return err;
  };
  const std::string mine = o.bind_host + ":" + std::to_string(*port);
  if (auto err = store.set(o.prefix + "actors/" + std::to_string(o.rank),
                           std::vector<char>(mine.begin(), mine.end())))
    return give_up(err);
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  for (uint32_t j = 0; j < o.size; ++j) {
    if (j == o.rank) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto value = store.get(o.prefix + "actors/" + std::to_string(j),
                           std::max(left, std::chrono::milliseconds(1)));
    if (!value) return give_up(value.error());
    auto address = parse_address(*value);
    if (!address) return give_up(address.error());
    // Connecting directly: chunks go to the member's node, not through the coordinator's.
    auto peer = net::remote_actor(sys, address->first, address->second,
                                  std::max(left, std::chrono::milliseconds(1)));
    if (!peer)
      return give_up(make_error(
          errc::collective_failed,
          "actors: cannot reach member " + std::to_string(j) + ": " + sys.render(peer.error())));
    peers[j] = std::move(*peer);
    caf::anon_send(box, peer_atom_v, o.key, j, peers[j]);  // watched from now on
  }
  return std::unique_ptr<collective>(
      new actor_collective(sys, o, std::move(queue), std::move(box), *port, std::move(peers)));
}

}  // namespace troupe
