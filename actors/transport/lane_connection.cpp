#include "actors/transport/lane_connection.hpp"

#include <string>

namespace troupe {

namespace {

using connection = lane_listener::connection;

lane::frame_header gone_header(uint64_t frame, size_t size) {
  lane::frame_header h;
  h.kind = static_cast<uint8_t>(lane::frame_kind::gone);
  h.id = frame;
  h.size = size;
  return h;
}

// An unwritten payload copied into the frame's own bytes.
void gather(connection::answer_frame& f) {
  if (!f.unwritten) return;
  f.payload = f.unwritten->gathered();
  f.unwritten.reset();
}

// The bytes of `out` on the socket (a payload moved to the ring is no longer counted).
size_t size_of(const connection::outgoing& out) {
  size_t total = 0;
  for (const auto& f : out.frames) total += sizeof f.header + f.payload.size();
  return total;
}

}  // namespace

bool connection::reserve(std::chrono::milliseconds timeout, std::chrono::milliseconds period) {
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

bool connection::owe(uint64_t request, uint64_t frame, clock::time_point deadline) {
  std::lock_guard<std::mutex> lock{mutex};
  for (const auto& [r, f] : owed)
    if (f.frame == frame) return false;
  owed[request] = owed_frame{frame, deadline};
  return true;
}

std::optional<uint64_t> connection::settle(uint64_t request) {
  std::lock_guard<std::mutex> lock{mutex};
  auto i = owed.find(request);
  if (i == owed.end()) return std::nullopt;
  const uint64_t frame = i->second.frame;
  owed.erase(i);
  return frame;
}

void connection::hold_for_pull(uint64_t frame) {
  std::lock_guard<std::mutex> lock{mutex};
  held.emplace(frame + 1, std::nullopt);
}

void connection::release_pair(uint64_t frame) {
  std::unique_lock<std::mutex> lock{mutex};
  auto i = held.find(frame + 1);
  if (i == held.end()) return;
  auto answer = std::move(i->second);
  held.erase(i);
  if (!answer || closed) return;
  outgoing out;
  out.frames.push_back(std::move(*answer));
  send_locked(lock, std::move(out));
}

void connection::sweep() {
  std::lock_guard<std::mutex> lock{mutex};
  sweep_locked();
}

void connection::post(answer_frame answer) {
  std::unique_lock<std::mutex> lock{mutex};
  if (closed) return;
  const uint64_t frame = answer.header.id;
  if (auto i = held.find(frame + 1); i != held.end() && !i->second) {
    gather(answer);                 // kept past this call
    i->second = std::move(answer);  // a paired push's: it goes out with its pull's
    return;
  }
  outgoing out;
  if (auto i = held.find(frame); i != held.end()) {  // a pull's: its push's answer goes first
    if (i->second) out.frames.push_back(std::move(*i->second));
    held.erase(i);
  }
  out.frames.push_back(std::move(answer));
  send_locked(lock, std::move(out));
}

void connection::send_locked(std::unique_lock<std::mutex>& lock, outgoing out) {
  place_payloads(out);  // in the order the answers reach the socket, as the client takes them
  if (writing || !outbox.empty()) {
    outbox.push_back(std::move(out));
    lock.unlock();
    has_output.notify_one();
    return;
  }
  writing = true;
  lock.unlock();
  const auto written = write(out, false);
  lock.lock();
  writing = false;
  if (!written) {
    lock.unlock();
    return close();
  }
  if (*written == size_of(out)) {
    in_flight -= static_cast<int>(out.frames.size());
    const bool more = !outbox.empty();
    lock.unlock();
    answered.notify_one();
    if (more) has_output.notify_one();
    return;
  }
  out.written = *written;  // the rest goes first: nothing else was written meanwhile
  outbox.push_front(std::move(out));
  lock.unlock();
  has_output.notify_one();
}

void connection::write_answers() {
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
      in_flight -= static_cast<int>(next.frames.size());
    }
    answered.notify_one();
  }
}

void connection::close() {
  {
    std::lock_guard<std::mutex> lock{mutex};
    closed = true;
  }
  answered.notify_all();
  has_output.notify_all();
  socket.shutdown();
}

void connection::place_payloads(outgoing& out) {
  for (auto& f : out.frames) {
    const size_t size = f.header.size;
    bool in_ring = false;
    if (out_ring && size >= lane::ring_min_payload) {
      if (f.unwritten) {
        f.unwritten->write_to([&](byte_parts parts) { in_ring = out_ring->put(parts, size); });
      } else {
        const std::span<const char> whole{f.payload.data(), f.payload.size()};
        in_ring = out_ring->put(byte_parts{&whole, 1}, size);
      }
    }
    if (in_ring) {
      f.header.in_ring = 1;
      f.payload = wire_bytes{};
      f.unwritten.reset();
    } else {
      gather(f);
    }
  }
}

caf::expected<size_t> connection::write(const outgoing& out, bool wait) {
  std::vector<std::span<const char>> payloads;
  payloads.reserve(out.frames.size());  // no reallocation: the frames point into it
  std::vector<lane::frame_out> frames;
  for (const auto& f : out.frames) {
    payloads.emplace_back(f.payload.data(), f.payload.size());
    frames.push_back({f.header, byte_parts{&payloads.back(), f.payload.empty() ? 0u : 1u}});
  }
  return lane::write_frames_from(socket, frames, out.written, wait);
}

void connection::sweep_locked() {
  const auto now = clock::now();
  bool posted = false;
  for (auto i = owed.begin(); i != owed.end();) {
    if (i->second.deadline > now || closed) {
      ++i;
      continue;
    }
    const uint64_t frame = i->second.frame;
    outgoing out;
    if (auto h = held.find(frame); h != held.end()) {  // a late pull lets its push's answer go
      if (h->second) out.frames.push_back(std::move(*h->second));
      held.erase(h);
    }
    const std::string why = "the bucket did not answer in time";
    out.frames.push_back({gone_header(frame, why.size()), {why.begin(), why.end()}});
    place_payloads(out);
    outbox.push_back(std::move(out));
    posted = true;
    i = owed.erase(i);
  }
  if (posted) has_output.notify_one();
}

}  // namespace troupe
