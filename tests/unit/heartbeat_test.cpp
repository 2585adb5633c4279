// The heartbeat monitor judges silence over the watcher's own awake time: a node that stops
// is lost after the timeout, while a watcher that was itself stopped (its calls late) does not
// count that time against anyone and judges only once what queued up has been read. An awake
// deadline (the actors collective's waits) likewise does not count its own process's pause.
// The stall watchdog judges progress the same way: nothing moved for its bound, busy phases
// and its own pauses not counted.
#define BOOST_TEST_MODULE heartbeat_test
#include <boost/test/unit_test.hpp>

#include "actors/supervision/failure/heartbeat.hpp"
#include "actors/supervision/failure/stall_watch.hpp"

#include <thread>

using namespace troupe;
using namespace std::chrono_literals;

namespace {

constexpr auto interval = 500ms;
constexpr auto timeout = 2000ms;

// A monitor watching "a" and "b", and the time of its last call; ticks() calls it on time.
struct watcher {
  heartbeat_monitor monitor{interval};
  heartbeat_monitor::clock::time_point now{};

  watcher() {
    monitor.heard("a", now);
    monitor.heard("b", now);
  }
  // `n` calls, one interval apart, with "a" heard before each (when `a_beats`); who was lost.
  std::vector<std::string> ticks(int n, bool a_beats = true) {
    std::vector<std::string> lost;
    for (int i = 0; i < n; ++i) {
      now += interval;
      if (a_beats) monitor.heard("a", now);
      auto v = monitor.expired(now, timeout);
      lost.insert(lost.end(), v.lost.begin(), v.lost.end());
    }
    return lost;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_silent_node_is_lost_after_the_timeout_and_named_once) {
  watcher w;
  BOOST_TEST(w.ticks(4).empty());  // 2000 ms of silence: not yet more than the timeout
  const auto lost = w.ticks(1);
  BOOST_TEST(lost == std::vector<std::string>{"b"});
  BOOST_TEST(w.ticks(10).empty());  // forgotten: named once
}

BOOST_AUTO_TEST_CASE(the_watchers_own_pause_is_not_counted_and_judges_nobody) {
  watcher w;
  w.ticks(2);
  // The watcher is stopped for 10 s; the nodes' heartbeats wait in its socket.
  w.now += 10s;
  auto first = w.monitor.expired(w.now, timeout);
  BOOST_TEST(first.lost.empty());
  BOOST_TEST(first.not_running >= 9s);
  // What queued up is read before the next call: both nodes were alive all along.
  w.monitor.heard("a", w.now + 1ms);
  w.monitor.heard("b", w.now + 1ms);
  BOOST_TEST(w.ticks(3).empty());
}

BOOST_AUTO_TEST_CASE(a_node_silent_across_the_watchers_pause_is_still_found) {
  watcher w;
  w.now += 10s;
  BOOST_TEST(w.monitor.expired(w.now, timeout).lost.empty());  // judged on the next call
  w.monitor.heard("a", w.now);
  // "b" sent nothing: it is lost once the watcher's awake time passes the timeout, the pause
  // counting as two intervals only.
  std::vector<std::string> lost;
  int calls = 0;
  while (lost.empty() && calls < 20) lost = w.ticks(1), ++calls;
  BOOST_TEST(lost == std::vector<std::string>{"b"});
  BOOST_TEST(calls == 3);  // 1000 ms of the pause, then three intervals: past 2000 ms
}

BOOST_AUTO_TEST_CASE(a_watcher_always_late_still_judges_every_other_call) {
  watcher w;
  std::vector<std::string> lost;
  for (int i = 0; i < 6 && lost.empty(); ++i) {
    w.now += 3 * interval;  // every call late: each counts two intervals of awake time
    w.monitor.heard("a", w.now);
    lost = w.monitor.expired(w.now, timeout).lost;
  }
  BOOST_TEST(lost == std::vector<std::string>{"b"});
}

BOOST_AUTO_TEST_CASE(an_awake_deadline_does_not_count_a_pause_of_its_own_process) {
  awake_deadline deadline{250ms, 100ms};
  std::this_thread::sleep_for(400ms);  // as if stopped: counts two steps, 200 ms
  BOOST_TEST(!deadline.passed());
  int looks = 0;
  while (!deadline.passed() && looks < 100) std::this_thread::sleep_for(deadline.step()), ++looks;
  BOOST_TEST(looks >= 1);
  BOOST_TEST(looks < 100);
}

namespace {

// Ticks of 500 ms from `t`; the watch's verdict at the last.
std::optional<stall_watch::clock::duration> tick(stall_watch& watch,
                                                 stall_watch::clock::time_point& t, int ticks,
                                                 bool busy = false) {
  std::optional<stall_watch::clock::duration> verdict;
  for (int i = 0; i < ticks; ++i) {
    t += interval;
    verdict = watch.check(t, busy);
  }
  return verdict;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_job_with_no_progress_for_the_bound_is_stalled_and_one_that_moves_is_not) {
  stall_watch watch{std::chrono::seconds{3}, interval};
  auto t = stall_watch::clock::now();
  BOOST_TEST(!tick(watch, t, 4));  // 2 s quiet
  watch.progress(t);
  BOOST_TEST(!tick(watch, t, 6));  // 3 s: at the bound, not past it
  const auto verdict = tick(watch, t, 1);
  BOOST_TEST_REQUIRE(verdict.has_value());
  BOOST_TEST(std::chrono::duration<double>(*verdict).count() == 3.5);
}

BOOST_AUTO_TEST_CASE(
    busy_phases_count_as_progress_when_they_end_and_a_pause_of_its_own_is_not_quiet) {
  stall_watch watch{std::chrono::seconds{3}, interval};
  auto t = stall_watch::clock::now();
  BOOST_TEST(!tick(watch, t, 100, true));  // start-up, an evaluation: 50 s, not judged
  BOOST_TEST(!tick(watch, t, 6));          // 3 s since it ended
  BOOST_TEST(tick(watch, t, 1).has_value());
  stall_watch paused{std::chrono::seconds{3}, interval};
  auto u = stall_watch::clock::now();
  paused.check(u, false);
  paused.progress(u);
  u += std::chrono::minutes(5);  // the coordinator itself was stopped: two ticks count
  BOOST_TEST(!paused.check(u, false));
}

BOOST_AUTO_TEST_CASE(the_bound_is_ten_slowest_steps_when_that_is_longer_and_zero_is_off) {
  stall_watch watch{std::chrono::seconds{3}, interval};
  watch.step_took(0.5);
  BOOST_TEST(std::chrono::duration<double>(watch.bound()).count() == 5.0);
  watch.step_took(-1);  // nonsense times are ignored
  watch.step_took(1e9);
  BOOST_TEST(std::chrono::duration<double>(watch.bound()).count() == 5.0);
  stall_watch off{std::chrono::seconds{0}, interval};
  auto t = stall_watch::clock::now();
  BOOST_TEST(!tick(off, t, 10000));
}
