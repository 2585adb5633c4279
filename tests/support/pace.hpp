// How fast the jobs of tests train, and the floor under their length. A test that acts during
// a job (a kill, a pause, a join, a console read) waits for progress (progress.hpp) and then
// acts; so that no machine, however fast, finishes the job before the act, each worker of such
// a job waits a few milliseconds per batch (--worker-delay-ms): the job's floor.
//
// TROUPE_TEST_PACE checks that tests hold at other speeds: "fast" trains on a third of the data
// (about 3x faster than this project's 2-core machine, the acts at the same progress), "slow"
// adds to every batch about twice what it computes (about 3x slower). Unset: as measured.
// For tests only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::testing {

enum class test_pace { measured, fast, slow };

inline test_pace pace() {
  const char* text = std::getenv("TROUPE_TEST_PACE");
  const std::string_view v = text ? text : "";
  return v == "fast" ? test_pace::fast : v == "slow" ? test_pace::slow : test_pace::measured;
}

// What "slow" adds to every batch: twice what one computes on this project's 2-core machine
// (2.5 ms: the full 5-process fmnist job trains 1407 batches a worker in about 3.5 s).
inline constexpr uint32_t slow_extra_ms = 5;

// --worker-delay-ms for `workers` workers, each waiting `floor_ms` per batch (more when slow).
inline std::vector<std::string> job_floor(uint32_t workers, uint32_t floor_ms = 1) {
  const uint32_t ms = floor_ms + (pace() == test_pace::slow ? slow_extra_ms : 0);
  std::string ranks;
  for (uint32_t r = 0; r < workers; ++r) {
    if (r) ranks += ',';
    ranks += std::to_string(r);
    ranks += ':';
    ranks += std::to_string(ms);
  }
  return {"--worker-delay-ms", ranks};
}

// `coordinator_flags` with the default floor (1 ms a batch for each of `workers` workers) unless
// they set --worker-delay-ms themselves.
inline std::vector<std::string> with_floor(std::vector<std::string> coordinator_flags,
                                           uint32_t workers) {
  for (const auto& flag : coordinator_flags)
    if (flag == "--worker-delay-ms") return coordinator_flags;
  const auto floor = job_floor(workers);
  coordinator_flags.insert(coordinator_flags.end(), floor.begin(), floor.end());
  return coordinator_flags;
}

// `n` examples, or a third of them at the fast pace.
inline uint64_t paced_count(uint64_t n) {
  return pace() == test_pace::fast ? n / 3 : n;
}

// `flags` with the data flag `data_flag` (troupe-fmnist's --train-limit, troupe-ctr's
// --train-examples) cut to a third when fast; `all` is the size of the whole set, used when the
// flag is not given.
inline std::vector<std::string> paced_data(std::vector<std::string> flags,
                                           const std::string& data_flag = "--train-limit",
                                           uint64_t all = 60000) {
  if (pace() != test_pace::fast) return flags;
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == data_flag) {
      const uint64_t n = std::stoull(flags[i + 1]);
      flags[i + 1] = std::to_string(paced_count(n ? n : all));
      return flags;
    }
  flags.insert(flags.end(), {data_flag, std::to_string(paced_count(all))});
  return flags;
}

}  // namespace troupe::testing
