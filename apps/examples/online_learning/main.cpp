// online-learning: a Troupe app of its own actors. A source actor streams events (x, y) whose
// true model drifts; learner actors, under a one_for_one supervisor, take batches of them,
// score each event before learning from it (prequential accuracy), and pull and push the
// model through Troupe's parameter service. A learner told to crash (--crash-after) is
// restarted by its supervisor, and the source hands its batch to the restarted one. With
// --secret, troupe-console reads the supervision tree (app_node), learners and buckets.
#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "troupe/app_node.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"
#include "troupe/options.hpp"
#include "troupe/parameter_service.hpp"
#include "troupe/random.hpp"
#include "troupe/supervision.hpp"

using namespace troupe;

namespace {

constexpr uint32_t dim = 8, batch = 100, window = 20000;
constexpr auto ask_within = std::chrono::seconds(30);

// Event i: x uniform in [-1, 1]^dim, y = 1 when w(i).x + 0.1 > 0, where w(i) turns slowly.
void event(uint64_t i, uint64_t seed, float* x, float& y) {
  double margin = 0.1;
  for (uint32_t j = 0; j < dim; ++j) {
    x[j] = 2 * unit_float(splitmix64(seed ^ (i * dim + j))) - 1;
    margin += std::sin(j + 1 + double(i) * 2e-5) * x[j];
  }
  y = margin > 0 ? 1.0f : 0.0f;
}

// Scores a batch with the pulled model (how many it gets right), then learns from it: the
// mean logistic-loss gradient, pushed with the snapshot's clocks.
caf::behavior learner(caf::event_based_actor* self, parameter_client client, int crash_after) {
  auto batches = std::make_shared<int>(0);
  return {[=](const std::vector<float>& xs, const std::vector<float>& ys) -> caf::result<uint32_t> {
    if (++*batches == crash_after) {
      self->quit(make_error(errc::injected_fault, "told to crash"));
      return make_error(errc::injected_fault, "told to crash");
    }
    auto promise = self->make_response_promise<uint32_t>();
    client.pull(self, [=](caf::expected<parameter_snapshot> read) mutable {
      if (!read) {
        promise.deliver(std::move(read.error()));
        return;
      }
      const std::vector<float>& w = read->values;  // dim weights, then the bias
      std::vector<float> grad(w.size(), 0.0f);
      uint32_t correct = 0;
      for (size_t e = 0; e < ys.size(); ++e) {
        const float* x = &xs[e * dim];
        double z = w[dim];
        for (uint32_t j = 0; j < dim; ++j) z += w[j] * x[j];
        const double p = 1 / (1 + std::exp(-z));
        correct += (p > 0.5) == (ys[e] > 0.5f);
        const float g = float((p - ys[e]) / double(ys.size()));
        for (uint32_t j = 0; j < dim; ++j) grad[j] += g * x[j];
        grad[dim] += g;
      }
      client.push(self, grad, *read, [=](caf::expected<push_outcome> done) mutable {
        if (done)
          promise.deliver(correct);
        else
          promise.deliver(std::move(done.error()));
      });
    });
    return promise;
  }};
}

struct stream_summary {
  uint64_t events = 0, resent = 0;
  double last_accuracy = 0;
  caf::error failure;
};

struct batch_data {
  std::vector<float> xs, ys;  // batch * dim features, batch labels
};

struct source_state {
  uint64_t next = 0, scored = 0, correct = 0, busy = 0, retries = 0;
  bool ended = false;
  std::map<uint64_t, std::function<void()>> waiting;  // batches to hand out again, by id
  stream_summary summary;
};

struct source_config {
  caf::actor learners;  // their supervisor
  uint32_t count = 0;   // learners
  uint64_t events = 0, seed = 0;
  std::function<void(stream_summary)> finished;
};

using source_ptr = caf::stateful_actor<source_state>*;

void end_stream(source_ptr self, const source_config& c, caf::error failure = {}) {
  if (std::exchange(self->state.ended, true)) return;
  self->state.summary.failure = std::move(failure);
  self->state.summary.events = self->state.scored;
  c.finished(self->state.summary);
  self->quit();
}

void scored(source_ptr self, const source_config& c, uint32_t i, uint32_t correct);

// Sends a batch to learner `i` (its current actor, asked of the supervisor each time: a
// restarted learner has a new one). After a failure the batch goes again, up to 6 times,
// 20 ms later and twice as long each time: the supervisor restarts a learner after a backoff.
void hand_out(source_ptr self, const source_config& c, uint32_t i, std::shared_ptr<batch_data> b,
              int attempt) {
  const std::string name = "learner-" + std::to_string(i);
  child_of(self, c.learners, name, ask_within, [=](caf::expected<caf::actor> learner) {
    auto retry = [=](caf::error err) {
      if (attempt == 6) return end_stream(self, c, std::move(err));
      ++self->state.summary.resent;
      const uint64_t id = ++self->state.retries;
      self->state.waiting[id] = [=] { hand_out(self, c, i, b, attempt + 1); };
      self->delayed_send(self, std::chrono::milliseconds(20 << attempt), id);
    };
    if (!learner) return retry(std::move(learner.error()));
    self->request(*learner, ask_within, b->xs, b->ys)
        .then([=](uint32_t correct) { scored(self, c, i, correct); },
              [=](caf::error& err) { retry(std::move(err)); });
  });
}

void next_batch(source_ptr self, const source_config& c, uint32_t i) {
  auto& st = self->state;
  if (st.next >= c.events) {
    if (st.busy == 0) end_stream(self, c);
    return;
  }
  auto events = std::make_shared<batch_data>(
      batch_data{std::vector<float>(batch * dim), std::vector<float>(batch)});
  for (uint32_t e = 0; e < batch; ++e)
    event(st.next + e, c.seed, &events->xs[e * dim], events->ys[e]);
  st.next += batch;
  ++st.busy;
  hand_out(self, c, i, std::move(events), 0);
}

void scored(source_ptr self, const source_config& c, uint32_t i, uint32_t correct) {
  auto& st = self->state;
  --st.busy;
  st.correct += correct;
  st.scored += batch;
  if (st.scored % window == 0) {
    st.summary.last_accuracy = double(st.correct) / window;
    std::printf("events %7llu  prequential accuracy %.4f\n", (unsigned long long)st.scored,
                st.summary.last_accuracy);
    std::fflush(stdout);
    st.correct = 0;
  }
  next_batch(self, c, i);
}

caf::behavior source(source_ptr self, source_config c) {
  for (uint32_t i = 0; i < c.count; ++i) next_batch(self, c, i);
  // The rest is replies to its requests, batches to hand out again, and main() ending the
  // stream early.
  return {[=](uint64_t retry) {
            auto it = self->state.waiting.find(retry);
            if (it == self->state.waiting.end()) return;
            auto again = std::move(it->second);
            self->state.waiting.erase(it);
            again();
          },
          [=](const std::string& why) {
            end_stream(self, c, make_error(errc::timeout, "stopped by main: " + why));
          }};
}

struct example_flags {
  launch_options opts;
  uint64_t events = 0;
  int crash_after = 0;
  double min_accuracy = 0, linger_s = 0;
};

caf::expected<example_flags> parse_flags(int argc, char** argv,
                                         const std::vector<app_flag>& flags) {
  auto opts = parse_launch_options({argv + 1, argv + argc}, process_environment(), flags,
                                   {{"optimizer", "sgd"}, {"lr", "0.5"}, {"workers", "3"}});
  if (!opts) return std::move(opts.error());
  auto events = opts->app_number<uint64_t>("events");
  auto crash = opts->app_number<int>("crash-after");
  auto floor = opts->app_number<double>("min-accuracy");
  auto linger = opts->app_number<double>("linger");
  if (!events) return std::move(events.error());
  if (!crash) return std::move(crash.error());
  if (!floor) return std::move(floor.error());
  if (!linger) return std::move(linger.error());
  return example_flags{*opts, *events, *crash, *floor, *linger};
}

// The learners, each with its parameter client, under a one_for_one supervisor. Learner 0
// crashes once on its crash_after-th batch (0: never).
caf::actor start_learners(caf::actor_system& sys, const parameter_service& service, uint32_t count,
                          int crash_after) {
  auto crashed = std::make_shared<std::atomic<bool>>(false);
  std::vector<child_spec> learners;
  for (uint32_t i = 0; i < count; ++i) {
    auto client = *service.client(i);
    child_spec spec{"learner-" + std::to_string(i), [=](caf::local_actor* self, caf::actor_addr) {
                      const bool crash = i == 0 && crash_after > 0 && !crashed->exchange(true);
                      return self->spawn(learner, client, crash ? crash_after : 0);
                    }};
    spec.kind = "learner";
    learners.push_back(std::move(spec));
  }
  supervisor_config sc;
  sc.name = "learners";
  sc.log = logger{"online-learning"};
  return spawn_supervisor(sys, sc, learners);
}

// Waits up to `seconds` for SIGINT or SIGTERM (blocked in every thread since main began).
void linger(double seconds) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  const timespec wait{time_t(seconds), long((seconds - std::floor(seconds)) * 1e9)};
  sigtimedwait(&stop, nullptr, &wait);
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t stop;  // blocked before CAF starts its threads, so that linger() receives them
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  const std::vector<app_flag> flags = {
      {"events", "N", "events in the stream", "200000", app_flag::whole},
      {"crash-after", "K", "learner 0 crashes on its K-th batch, once (0: never)", "0",
       app_flag::whole},
      {"min-accuracy", "A", "exit 1 unless the last window's accuracy reaches A", "0",
       app_flag::number},
      {"linger", "S", "with --secret: keep the console endpoint S s after the stream", "0",
       app_flag::number}};
  auto f = parse_flags(argc, argv, flags);
  if (!f) return std::fprintf(stderr, "online-learning: %s\n", describe(f.error()).c_str()), 2;
  if (f->opts.help) {
    std::printf(
        "%s",
        launch_usage("online-learning", "online learning by supervised actors", flags).c_str());
    return 0;
  }
  caf::actor_system_config cfg;
  configure_actor_system(cfg, f->opts);
  caf::actor_system sys{cfg};
  parameter_service_config pc;
  pc.tensors = {{"w", {dim}}, {"b", {1}}};
  pc.optimizer = optimizer_from(f->opts);
  pc.consistency = f->opts.consistency;
  pc.buckets = 2;
  pc.clients = f->opts.workers;
  auto service = parameter_service::start(sys, pc);
  if (!service) return std::fprintf(stderr, "%s\n", describe(service.error()).c_str()), 1;
  auto learners = start_learners(sys, *service, f->opts.workers, f->crash_after);
  std::optional<app_node> node;  // with a secret, troupe-console can read the tree
  if (!f->opts.secret.empty()) {
    auto started = app_node::start(sys, f->opts, logger{"online-learning"});
    if (!started) return std::fprintf(stderr, "%s\n", describe(started.error()).c_str()), 1;
    node = *started;
    node->show("learners", learners);
    node->show("parameters", service->supervisor());
  }

  std::promise<stream_summary> done;
  auto finished = done.get_future();
  auto streaming =
      sys.spawn(source, source_config{learners, f->opts.workers, f->events, f->opts.seed,
                                      [&done](stream_summary s) { done.set_value(std::move(s)); }});
  if (finished.wait_for(std::chrono::minutes(5)) != std::future_status::ready)
    caf::anon_send(streaming, std::string{"no end after 5 minutes"});
  const auto s = finished.get();  // the source answers "stop" at once
  if (!s.failure)
    std::printf("%llu events, %llu batches handed out again, last accuracy %.4f\n",
                (unsigned long long)s.events, (unsigned long long)s.resent, s.last_accuracy);
  std::fflush(stdout);
  if (node) linger(f->linger_s);
  if (node) node->stop();
  caf::anon_send_exit(learners, caf::exit_reason::kill);
  service->stop();
  if (s.failure)
    return std::fprintf(stderr, "online-learning: %s\n", describe(s.failure).c_str()), 1;
  return s.last_accuracy >= f->min_accuracy ? 0 : 1;
}
