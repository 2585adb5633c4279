// troupe/blocking_parameter_client.hpp: a parameter_client run by an actor of its own. Calls
// queue jobs for that actor and wake it with run_atom; each job calls the event-based client
// and its answer fulfils the caller's future.
#include "troupe/blocking_parameter_client.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>

#include "messages/protocol.hpp"
#include "troupe/detail/answer_promise.hpp"

namespace troupe {

namespace {

template <class T>
using answer = detail::answer_promise<T>;

using job = std::function<void(caf::event_based_actor*)>;

const std::string stopped = "the parameter client stopped";

}  // namespace

struct blocking_parameter_client::runner {
  // What the caller's threads and the client's actor share.
  struct shared {
    explicit shared(parameter_client c) : client(std::move(c)) {}
    parameter_client client;
    std::mutex mutex;
    std::deque<job> jobs;
    std::atomic<uint64_t> pushes{0};
  };
  std::shared_ptr<shared> state;
  caf::actor actor;

  ~runner() { caf::anon_send_exit(actor, caf::exit_reason::user_shutdown); }

  // Hands `j` to the actor.
  void post(job j) {
    {
      std::lock_guard<std::mutex> lock{state->mutex};
      state->jobs.push_back(std::move(j));
    }
    caf::anon_send(actor, run_atom_v);
  }
};

namespace {

caf::behavior client_actor(caf::event_based_actor* self,
                           std::shared_ptr<blocking_parameter_client::runner::shared> state) {
  return {[self, state](run_atom) {
    std::deque<job> jobs;
    {
      std::lock_guard<std::mutex> lock{state->mutex};
      jobs.swap(state->jobs);
    }
    for (auto& j : jobs) j(self);
  }};
}

}  // namespace

caf::expected<blocking_parameter_client> blocking_parameter_client::open(
    caf::actor_system& sys, const parameter_service& service, uint32_t id) {
  auto client = service.client(id);
  if (!client) return std::move(client.error());
  auto state = std::make_shared<runner::shared>(std::move(*client));
  auto r = std::make_unique<runner>();
  r->state = state;
  // Scheduled, not detached: the client never blocks, and a detached actor's thread waits until
  // nothing references the actor any more. Something still did at exit about once in 40 runs
  // of app_node_test's peer: ~actor_system waited in await_detached_threads for good, the
  // actor's thread in await_self_destroyed (gdb); 150 runs since, none.
  r->actor = sys.spawn(client_actor, state);
  return blocking_parameter_client{std::move(r)};
}

blocking_parameter_client::blocking_parameter_client(std::unique_ptr<runner> r)
    : runner_(std::move(r)) {}
blocking_parameter_client::blocking_parameter_client(blocking_parameter_client&&) noexcept =
    default;
blocking_parameter_client& blocking_parameter_client::operator=(
    blocking_parameter_client&&) noexcept = default;
blocking_parameter_client::~blocking_parameter_client() = default;

uint32_t blocking_parameter_client::id() const {
  return runner_->state->client.id();
}

size_t blocking_parameter_client::size() const {
  return runner_->state->client.size();
}

uint64_t blocking_parameter_client::pushes() const {
  return runner_->state->pushes.load();
}

std::chrono::milliseconds blocking_parameter_client::timeout() const {
  return runner_->state->client.timeout();
}

std::vector<std::string> blocking_parameter_client::routes() {
  auto out = std::make_shared<answer<std::vector<std::string>>>(stopped);
  auto future = out->future();
  auto state = runner_->state;
  runner_->post([state, out](caf::event_based_actor*) {
    std::vector<std::string> routes;
    for (uint32_t b = 0; b < state->client.buckets(); ++b) routes.push_back(state->client.route(b));
    out->set(std::move(routes));
  });
  auto routes = wait(future, default_bound());
  return routes ? std::move(*routes) : std::vector<std::string>{};
}

std::chrono::milliseconds blocking_parameter_client::default_bound() const {
  // A request may be sent twice, with the search for its bucket's successor between.
  return 4 * timeout();
}

std::future<caf::expected<parameter_snapshot>> blocking_parameter_client::pull_async(
    std::vector<std::vector<uint64_t>> ids) {
  auto out = std::make_shared<answer<parameter_snapshot>>(stopped);
  auto future = out->future();
  auto state = runner_->state;
  runner_->post([state, out, ids = std::move(ids)](caf::event_based_actor* self) mutable {
    state->client.pull(self, std::move(ids),
                       [out](caf::expected<parameter_snapshot> x) { out->set(std::move(x)); });
  });
  return future;
}

std::future<caf::expected<push_outcome>> blocking_parameter_client::push_async(
    std::span<const float> grad, const parameter_snapshot& read,
    std::vector<std::vector<float>> row_grads, std::optional<batch_range> batches) {
  auto out = std::make_shared<answer<push_outcome>>(stopped);
  auto future = out->future();
  auto state = runner_->state;
  // What the push needs of the snapshot: its clocks and the rows' ids, not its values.
  const parameter_snapshot stamps{{}, read.clocks, sparse_rows_view{read.rows.ids, {}, {}}};
  runner_->post([state, out, g = std::vector<float>(grad.begin(), grad.end()), stamps,
                 row_grads = std::move(row_grads), batches](caf::event_based_actor* self) {
    auto done = [out](caf::expected<push_outcome> x) { out->set(std::move(x)); };
    if (batches)
      state->client.push(self, g, stamps, row_grads, *batches, done);
    else
      state->client.push(self, g, stamps, row_grads, done);
    state->pushes = state->client.pushes();
  });
  return future;
}

caf::expected<parameter_snapshot> blocking_parameter_client::pull(
    std::vector<std::vector<uint64_t>> ids, std::optional<std::chrono::milliseconds> bound) {
  auto f = pull_async(std::move(ids));
  return wait(f, bound.value_or(default_bound()));
}

caf::expected<push_outcome> blocking_parameter_client::push(
    std::span<const float> grad, const parameter_snapshot& read,
    std::vector<std::vector<float>> row_grads, std::optional<batch_range> batches,
    std::optional<std::chrono::milliseconds> bound) {
  auto f = push_async(grad, read, std::move(row_grads), batches);
  return wait(f, bound.value_or(default_bound()));
}

}  // namespace troupe
