#include "troupe/loop_group.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "actors/dp/trainer/allreduce_group.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/detail/answer_promise.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

struct member_state;
using self_ptr = loop_member_actor::stateful_pointer<member_state>;
using job = std::function<void(self_ptr)>;

const std::string member_stopped = "the loop group member stopped";

}  // namespace

// What the caller's threads and the member's actor share.
struct loop_member::shared {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<job> jobs;
  loop_generation formed;  // the newest generation formed here (0: none yet)
  bool stopped = false;
  std::string why;  // of the stop
  loop_member_actor actor;

  void post(job j) {
    {
      std::lock_guard<std::mutex> lock{mutex};
      jobs.push_back(std::move(j));
    }
    caf::anon_send(actor, run_atom_v);
  }
  void stop(const std::string& reason) {
    std::lock_guard<std::mutex> lock{mutex};
    if (!stopped) why = reason;
    stopped = true;
    changed.notify_all();
  }
};

namespace {

struct member_state {
  static inline const char* name = "troupe.loop_member";
  std::shared_ptr<loop_member::shared> shared;
  loop_group_actor group;
  allreduce_group_actor collective;
  std::optional<group_start> current;  // the newest start
  std::string bind_host;
  logger log;
};

// errc::collective_failed unless generation `g` is the one this member has formed now.
caf::error check_current(self_ptr self, uint64_t g) {
  auto& st = self->state;
  uint64_t formed = 0;
  {
    std::lock_guard<std::mutex> lock{st.shared->mutex};
    formed = st.shared->formed.generation;
  }
  if (st.current && st.current->generation == g && formed == g) return {};
  return make_error(errc::collective_failed,
                    "generation " + std::to_string(g) + " is over: the group re-formed");
}

// The collective of generation `g` failed here: the group forms a new one.
void report_broken(self_ptr self, uint64_t g, const caf::error& err) {
  auto& st = self->state;
  if (st.current && st.current->generation == g)
    self->send(st.group, broken_atom_v, g, describe(err));
}

void form(self_ptr self, group_start start) {
  auto& st = self->state;
  auto f = std::make_shared<group_form>();
  f->generation = start.generation;
  f->rank = start.rank;
  f->size = start.size;
  f->token = start.token;
  f->key = start.group_key;
  f->collective = start.collective;
  f->bind_host = st.bind_host;
  f->timeout = std::chrono::milliseconds(start.timeout_ms);
  f->coordinator = st.group;
  f->hosts = start.hosts;
  const auto g = start.generation;
  const loop_generation formed{g, start.rank, start.size};
  st.current = std::move(start);
  self->request(st.collective, 2 * f->timeout, form_atom_v, std::shared_ptr<const group_form>{f})
      .then(
          [=](bool) {
            auto& st = self->state;
            if (!st.current || st.current->generation != g) return;
            std::lock_guard<std::mutex> lock{st.shared->mutex};
            st.shared->formed = formed;
            st.shared->changed.notify_all();
            st.log.info("generation {}: rank {} of {}", g, formed.rank, formed.size);
          },
          [=](caf::error& err) {
            self->state.log.warn("generation {}: forming failed: {}", g, describe(err));
            report_broken(self, g, err);
          });
}

loop_member_actor::behavior_type member(self_ptr self, std::shared_ptr<loop_member::shared> shared,
                                        loop_group_actor group, std::string bind_host, logger log) {
  self->state.shared = shared;
  self->state.group = group;
  self->state.bind_host = std::move(bind_host);
  self->state.log = log;
  self->state.collective = self->spawn<caf::detached + caf::linked>(allreduce_group, log);
  self->monitor(group);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source != self->state.group.address()) return;
    self->state.shared->stop("the loop group was lost: " + describe(msg.reason));
    self->quit(msg.reason);
  });
  return {
      [=](start_atom, const wire& w) {
        if (!sent_by(self, self->state.group.address())) return;
        auto start = decode<group_start>(w);
        if (!start) return self->state.log.warn("ignored a bad start: {}", describe(start.error()));
        form(self, std::move(*start));
      },
      [=](stop_atom, const std::string& why) {
        if (!sent_by(self, self->state.group.address())) return false;
        self->state.shared->stop(why);
        self->quit();
        return true;
      },
      [=](run_atom) {
        std::deque<job> jobs;
        {
          std::lock_guard<std::mutex> lock{self->state.shared->mutex};
          jobs.swap(self->state.shared->jobs);
        }
        for (auto& j : jobs) j(self);
      },
  };
}

}  // namespace

namespace {

// The group served as `name` by the app node `node`.
caf::expected<loop_group_actor> find_group(caf::actor_system& sys, const caf::actor& node,
                                           const std::string& name,
                                           std::chrono::milliseconds timeout) {
  caf::expected<loop_group_actor> group = make_error(errc::timeout, "the node did not answer");
  caf::scoped_actor self{sys};
  self->request(caf::actor_cast<coordinator_actor>(node), timeout, group_atom_v, name)
      .receive([&](const caf::actor& g) { group = caf::actor_cast<loop_group_actor>(g); },
               [&](caf::error& err) { group = std::move(err); });
  return group;
}

}  // namespace

caf::expected<std::unique_ptr<loop_member>> loop_member::join(
    caf::actor_system& sys, const caf::actor& node, const std::string& group_name,
    const std::string& name, const std::string& host, const std::string& bind_host,
    std::chrono::milliseconds timeout, const logger& log) {
  auto group = find_group(sys, node, group_name, timeout);
  if (!group) return std::move(group.error());
  auto sh = std::make_shared<shared>();
  sh->actor = sys.spawn<caf::detached>(member, sh, *group, bind_host, log);
  caf::scoped_actor self{sys};
  caf::error failed = make_error(errc::timeout, "the loop group did not answer the join");
  join_request request{role::worker, name, 0, endpoint{}, host};
  self->request(*group, timeout, join_atom_v, encode(request), sh->actor)
      .receive([&](const wire&) { failed = caf::error{}; },
               [&](caf::error& err) { failed = std::move(err); });
  if (failed) {
    caf::anon_send_exit(sh->actor, caf::exit_reason::user_shutdown);
    return failed;
  }
  return std::unique_ptr<loop_member>(new loop_member(std::move(sh)));
}

loop_member::~loop_member() {
  leave();
}

caf::expected<loop_generation> loop_member::generation(uint64_t after,
                                                       std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock{shared_->mutex};
  const bool ready = shared_->changed.wait_for(
      lock, bound, [&] { return shared_->stopped || shared_->formed.generation > after; });
  if (shared_->stopped) return make_error(errc::job_failed, shared_->why);
  if (!ready) return make_error(errc::timeout, "no new generation of the loop group in time");
  return shared_->formed;
}

std::future<caf::expected<reduce_done>> loop_member::reduce(uint64_t g, std::span<float> data,
                                                            uint32_t tag,
                                                            std::shared_ptr<const void> owner) {
  auto out = std::make_shared<detail::answer_promise<reduce_done>>(member_stopped);
  auto future = out->future();
  shared_->post([=](self_ptr self) {
    if (auto err = check_current(self, g)) return out->set(std::move(err));
    auto order = std::make_shared<reduce_order>();
    order->data = data;
    order->tag = tag;
    order->owner = owner;
    const auto bound = 2 * std::chrono::milliseconds(self->state.current->timeout_ms);
    self->request(self->state.collective, bound, reduce_atom_v,
                  std::shared_ptr<const reduce_order>{order})
        .then([=](reduce_done done) { out->set(done); },
              [=](caf::error& err) {
                report_broken(self, g, err);
                out->set(make_error(errc::collective_failed, describe(err)));
              });
  });
  return future;
}

std::future<caf::expected<sync_result>> loop_member::sync(uint64_t g, uint64_t steps,
                                                          std::vector<char> state) {
  auto out = std::make_shared<detail::answer_promise<sync_result>>(member_stopped);
  auto future = out->future();
  shared_->post([=, state = std::move(state)](self_ptr self) mutable {
    if (auto err = check_current(self, g)) return out->set(std::move(err));
    auto pieces = std::make_shared<byte_pieces>(std::move(state));
    auto order = std::make_shared<sync_order>(sync_order{steps, pieces});
    const auto bound = 2 * std::chrono::milliseconds(self->state.current->timeout_ms);
    self->request(self->state.collective, bound, sync_atom_v,
                  std::shared_ptr<const sync_order>{order})
        .then(
            [=](const std::shared_ptr<sync_result>& agreed) {
              agreed->state = std::move(*pieces).taken();
              out->set(*agreed);
            },
            [=](caf::error& err) {
              report_broken(self, g, err);
              out->set(make_error(errc::collective_failed, describe(err)));
            });
  });
  return future;
}

void loop_member::leave() {
  {
    std::lock_guard<std::mutex> lock{shared_->mutex};
    if (shared_->stopped) return;
  }
  shared_->post([](self_ptr self) {
    auto& st = self->state;
    if (st.current)
      self->send(st.group, done_atom_v, st.current->token);
    else
      self->send(st.group, done_atom_v, uint64_t{0});
    st.shared->stop("this member left the group");
    self->quit();
  });
}

}  // namespace troupe
