// Time and throughput as the coordinators and workers report them: seconds since a moment on
// the steady clock, the wall clock's now, and a job's rate and time left. Pure functions; any
// thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace troupe {

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Now by the wall clock, in milliseconds since the Unix epoch (a loss's at_unix_ms).
inline uint64_t unix_ms_now() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

struct throughput {
  double rate = 0;   // steps per second of this run
  double eta_s = 0;  // seconds left at that rate
};

// `done` of `total` steps, `from` of them done before this run began (a resumed job), this
// run `seconds` old.
inline throughput throughput_of(uint64_t done, uint64_t from, uint64_t total, double seconds) {
  const double rate = double(done - std::min(done, from)) / std::max(seconds, 1e-9);
  return {rate, rate > 0 ? double(total - std::min(total, done)) / rate : 0.0};
}

}  // namespace troupe
