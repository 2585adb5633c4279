// lane_connection: one accepted data lane on a server node (lane_server.hpp): its socket and
// shared rings, its reader and writer threads, the companion actor its buckets answer, the
// frames it owes an answer, the answers held back for a pair, and the answers waiting to be
// written. The reader waits while max_frames_in_flight frames are owed or unwritten, so the
// outbox holds at most that many. Used by lane_server.cpp only.
//
// Answers are written in the order they are posted, as one write where they can be: a paired
// push's answer (lane_socket.hpp) waits for its pull's, and both go out together, so the worker
// wakes once for the two. Late frames are answered `gone` by sweep(), which also lets go of
// what they held.
#pragma once

#include <caf/actor.hpp>
#include <caf/expected.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "actors/transport/lane_server.hpp"
#include "actors/transport/lane_socket.hpp"

namespace troupe {

struct lane_listener::connection {
  struct answer_frame {
    lane::frame_header header;  // its size is the payload's, written or not
    wire_bytes payload;
    // A bucket's pull reply not yet written: place_payloads() writes it into the ring, or
    // gathers it into `payload`, before the posting thread returns to the bucket.
    std::shared_ptr<const unwritten_bytes> unwritten;
  };
  // Answers written together, in one call where the socket takes them at once.
  struct outgoing {
    std::vector<answer_frame> frames;
    size_t written = 0;  // bytes of them (header first, frame by frame) already on the socket
  };
  struct owed_frame {
    uint64_t frame = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  using clock = std::chrono::steady_clock;

  connection(int fd, bool local) : socket(fd), local(local) {}
  lane::socket_fd socket;
  const bool local;                             // a same-host Unix socket: it shares rings
  std::unique_ptr<lane::shared_ring> out_ring;  // answers' payloads (under mutex)
  std::shared_ptr<lane::shared_ring> in_ring;   // requests' payloads (the reader's)
  std::thread reader;
  std::thread writer;
  std::atomic<bool> finished{false};
  caf::actor companion;  // set by the reader before its first frame

  // Waits (at most `timeout`) for room for one more frame, answering late frames `gone` every
  // `period` meanwhile; false when closed or still full.
  bool reserve(std::chrono::milliseconds timeout, std::chrono::milliseconds period);
  // Frame `frame`, passed to a bucket as `request`, is owed an answer by `deadline`; false
  // (nothing owed) when that frame number is already owed one (at most 64 are).
  bool owe(uint64_t request, uint64_t frame, clock::time_point deadline);
  // The frame that `request` answers, once (none when it was swept or never owed).
  std::optional<uint64_t> settle(uint64_t request);
  // The answer to the paired push `frame` waits for the answer to frame + 1, its pull.
  void hold_for_pull(uint64_t frame);
  // The frame after paired push `frame` was not its pull: its answer goes out on its own.
  void release_pair(uint64_t frame);
  void sweep();
  // The answer to a reserved frame. When nothing else is being written or waits, the posting
  // thread (a bucket's, through the companion) writes what the socket takes at once: no hop to
  // the writer thread, which was a wake-up and a context switch per answer. What does not fit
  // now, and every answer behind another, goes to the writer thread, in order. An unwritten
  // payload is written (into the ring, or gathered) before post returns.
  void post(answer_frame answer);
  // The writer thread: writes the answers in the order posted (waiting, as long as the socket's
  // send timeout, for a slow reader), each giving its frames' room back; a failed write ends
  // the connection.
  void write_answers();
  void close();

 private:
  // Queues or writes `out` (mutex held by `lock`; released on return).
  void send_locked(std::unique_lock<std::mutex>& lock, outgoing out);
  // Moves large payloads into the shared ring, in the order they reach the socket, and writes
  // each unwritten one there, or gathers it where it does not go (mutex held).
  void place_payloads(outgoing& out);
  // Writes `out` on from where it stopped: all of it with `wait`, or what the socket takes at
  // once. Returns how far it got (lane::write_frames_from).
  caf::expected<size_t> write(const outgoing& out, bool wait);
  // Answers `gone` every owed frame past its deadline (a bucket that never answers).
  void sweep_locked();

  std::mutex mutex;
  std::condition_variable answered;
  std::condition_variable has_output;
  std::deque<outgoing> outbox;
  std::unordered_map<uint64_t, owed_frame> owed;
  // Paired pushes' answers, by the pull frame whose answer they go out with (none yet: the
  // push is not answered).
  std::unordered_map<uint64_t, std::optional<answer_frame>> held;
  int in_flight = 0;
  bool closed = false;
  bool writing = false;  // a thread is writing to the socket (the writer, or post())
};

}  // namespace troupe
