// The coordinator's replicas of buckets (--replication R): each bucket has a primary and a
// chain of R - 1 backups on other servers. Here: where a copy goes, linking one copy of the
// chain to the next, promoting the first live backup when the primary's server is lost,
// taking a lost copy out of the chain, and growing the chain back to R copies. Only the
// coordinator decides who holds a bucket: a copy whose next one fails holds its
// acknowledgements until told here to forward elsewhere or to nobody.
#include <fmt/format.h>

#include <algorithm>

#include "actors/ps/ps_plan_parts.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

namespace {

// The copy at chain position k of bucket b: 0 is the primary, k > 0 the backup k - 1.
bucket_actor chain_at(const coordinator_state& st, uint32_t b, size_t k) {
  return k == 0 ? st.ps->directory.buckets[b] : st.ps->directory.homes[b].backups[k - 1].handle;
}

bucket_actor chain_tail(const coordinator_state& st, uint32_t b) {
  return chain_at(st, b, st.ps->directory.homes[b].backups.size());
}

// The chain position of `copy` in bucket b's chain, if it is in it.
std::optional<size_t> position_of(const coordinator_state& st, uint32_t b,
                                  const bucket_actor& copy) {
  const auto& backups = st.ps->directory.homes[b].backups;
  if (st.ps->directory.buckets[b] == copy) return size_t{0};
  for (size_t k = 0; k < backups.size(); ++k)
    if (backups[k].handle == copy) return k + 1;
  return std::nullopt;
}

// Names `from` to `to` (which then takes state only from it), then, if `wanted()` still holds
// (the chain may change while the first step is under way), has `from` copy its state there
// (down the rest of the chain too) and forward from then on; `done` after. `to_failed` runs
// when `to` does not take the first step, or the link is no longer wanted; `from_failed` when
// `from` does not take the second (it may be gone itself; if the copy to `to` failed, `from`
// reports that on its own).
template <class Wanted, class Done, class Failed, class FromFailed>
void link_copies(self_ptr self, const job_config& config, const bucket_actor& from,
                 const bucket_actor& to, Wanted wanted, Done done, Failed to_failed,
                 FromFailed from_failed) {
  const auto timeout = config.opts.request_timeout;
  self->request(to, timeout, primary_atom_v, caf::actor_cast<caf::actor>(from))
      .then(
          [=](bool) {
            if (!wanted()) {
              caf::error changed = make_error(errc::job_failed, "the chain changed meanwhile");
              return to_failed(changed);
            }
            self->request(from, timeout, backup_atom_v, caf::actor_cast<caf::actor>(to))
                .then(done, from_failed);
          },
          to_failed);
}

// The copy `at` forwards to nobody from now on; what it held is acknowledged.
void end_chain_at(self_ptr self, const job_config& config, const bucket_actor& at) {
  self->request(at, config.opts.request_timeout, backup_atom_v, caf::actor{})
      .then([](bool) {}, [](caf::error&) {});
}

void remove_backup(self_ptr self, const job_config& config, uint32_t b, const bucket_actor& handle);

// Position k of bucket b's chain forwards to position k + 1 again (after a restart, or a copy
// taken out in between): k + 1 takes k's whole state. Without a position k + 1, k forwards to
// nobody. A link that fails takes k + 1 out of the chain (a link overtaken by a change of the
// chain is left to that change). `then` runs afterwards either way.
void relink(
    self_ptr self, const job_config& config, uint32_t b, size_t k,
    std::function<void()> then = [] {}) {
  auto& st = self->state;
  const auto& home = st.ps->directory.homes[b];
  const auto from = chain_at(st, b, k);
  if (k >= home.backups.size()) {
    end_chain_at(self, config, from);
    return then();
  }
  const auto to = home.backups[k].handle;
  auto still_next = [=] {  // `to` still follows `from`
    const auto at = position_of(self->state, b, from);
    const auto& backups = self->state.ps->directory.homes[b].backups;
    return at && *at < backups.size() && backups[*at].handle == to;
  };
  link_copies(
      self, config, from, to, still_next, [then](bool) { then(); },
      [=](caf::error& err) {
        if (still_next()) {
          config.log.warn("bucket {}: a backup could not be linked: {}", b, describe(err));
          remove_backup(self, config, b, to);
        }
        then();
      },
      [=](caf::error& err) {
        config.log.warn("bucket {}: a copy could not be linked to its backup: {}", b,
                        describe(err));
        then();
      });
}

// Adds one backup of bucket b at the end of its chain, on a live server that holds no copy of
// it; `done(true)` once it holds the state, `done(false)` when none can be made. One addition
// per bucket at a time: the others wait their turn.
void add_copy(self_ptr self, const job_config& config, uint32_t b, std::function<void(bool)> done) {
  auto& home = self->state.ps->directory.homes[b];
  if (home.adding) {
    home.after_adding.push_back([=] { add_copy(self, config, b, done); });
    return;
  }
  home.adding = true;
  auto finish = [=](bool ok) {
    auto& home = self->state.ps->directory.homes[b];
    home.adding = false;
    done(ok);
    if (!home.adding && !home.after_adding.empty()) {
      auto next = std::move(home.after_adding.front());
      home.after_adding.erase(home.after_adding.begin());
      next();
    }
  };
  const auto s = server_for_copy(self->state, b);
  if (!s) {
    config.log.warn("bucket {} has {} copies: no other live server", b, home.backups.size() + 1);
    return finish(false);
  }
  host_bucket(
      self, config, b, *s,
      [=](bucket_actor& copy) {
        const auto tail = chain_tail(self->state, b);
        auto tail_unchanged = [=] { return chain_tail(self->state, b) == tail; };
        auto give_up = [=](caf::error& err) {
          if (!tail_unchanged()) {  // that copy was lost meanwhile: try again at the new end
            self->state.ps->directory.homes[b].adding = false;
            return add_copy(self, config, b, done);
          }
          config.log.warn("bucket {}: no new backup: {}", b, describe(err));
          end_chain_at(self, config, tail);
          finish(false);
        };
        link_copies(
            self, config, tail, copy, tail_unchanged,
            [=](bool) {
              auto& st = self->state;
              auto& home = st.ps->directory.homes[b];
              // The chain's end changed meanwhile (that copy was lost): make another.
              if (chain_tail(st, b) != tail) {
                home.adding = false;
                return add_copy(self, config, b, done);
              }
              // Its server was lost or is being drained meanwhile: drop it, make another.
              const auto& host = st.ps->roster.server_members[*s];
              if (host.lost || host.draining) {
                end_chain_at(self, config, tail);
                home.adding = false;
                return add_copy(self, config, b, done);
              }
              home.backups.push_back(bucket_copy{copy, *s, 0});
              config.log.info("bucket {}: copy {} onto server '{}'", b, home.backups.size() + 1,
                              host.name);
              finish(true);
            },
            give_up, give_up);
      },
      [=](caf::error& err) {
        config.log.warn("bucket {}: no new backup: {}", b, describe(err));
        finish(false);
      });
}

// Takes backup `handle` out of bucket b's chain (its server lost or drained, or its link
// failed): the copy before it forwards to the one after it, which takes its whole state (or
// to nobody, at the end); then the chain grows back.
void remove_backup(self_ptr self, const job_config& config, uint32_t b,
                   const bucket_actor& handle) {
  auto& backups = self->state.ps->directory.homes[b].backups;
  auto it = std::find_if(backups.begin(), backups.end(),
                         [&](const bucket_copy& c) { return c.handle == handle; });
  if (it == backups.end()) return;
  const size_t k = static_cast<size_t>(it - backups.begin());
  // A copy removed from a live server may still run there (it is not stopped): that server
  // gets no new copy of this bucket, so that a restart of the old one (moved) is not taken for
  // the chain's copy.
  if (!self->state.ps->roster.server_members[it->server].lost)
    self->state.ps->directory.homes[b].left_on.push_back(it->server);
  backups.erase(it);
  relink(self, config, b, k);
  fill_chain(self, config, b);
}

// The first backup of bucket b whose server is alive becomes its primary; the dead ones
// before it leave the chain, the ones after it stay its backups, and the chain grows back.
// A promotion overtaken by another (its copy's server was lost meanwhile) is forgotten.
void promote(self_ptr self, const job_config& config, uint32_t b, size_t first_live) {
  auto& st = self->state;
  auto& home = st.ps->directory.homes[b];
  if (!home.recovering) ++st.ps->directory.recovering;
  home.recovering = true;
  const uint64_t promotion = ++home.promotion;
  const bucket_copy next = home.backups[first_live];
  if (first_live > 0)
    config.log.info("bucket {}: promoting its copy on '{}' ({} before it lost too)", b,
                    st.ps->roster.server_members[next.server].name, first_live);
  home.backups.erase(home.backups.begin(), home.backups.begin() + first_live + 1);
  st.ps->directory.buckets[b] = next.handle;  // which() holds its answers until it is served
  home.primary_server = next.server;
  home.primary_restarts = next.restarts;
  self->request(next.handle, config.opts.request_timeout, promote_atom_v)
      .then(
          [=](bool) {
            if (self->state.ps->directory.homes[b].promotion != promotion) return;
            set_primary(self, b, next.handle, next.server);
            served_again(self, config, b);
            // A copy made only to drain a server (--replication 1) has none after it.
            fill_chain(self, config, b);
          },
          [=](caf::error& err) {
            if (self->state.ps->directory.homes[b].promotion != promotion) return;
            fail_job(self, config,
                     fmt::format("promoting the backup of bucket {}: {}", b, describe(err)));
          });
}

}  // namespace

std::optional<uint32_t> server_for_copy(const coordinator_state& st, uint32_t b) {
  std::vector<size_t> load(st.ps->roster.servers.size(), 0);
  for (const auto& h : st.ps->directory.homes) {
    ++load[h.primary_server];
    for (const auto& c : h.backups) ++load[c.server];
  }
  const auto& home = st.ps->directory.homes[b];
  std::optional<uint32_t> best;
  for (uint32_t s = 0; s < st.ps->roster.servers.size(); ++s)
    if (!home.holds_copy_on(s) && !home.left_on_server(s) &&
        !st.ps->roster.server_members[s].lost && !st.ps->roster.server_members[s].draining &&
        (!best || load[s] < load[*best]))
      best = s;
  return best;
}

void add_backup(self_ptr self, const job_config& config, uint32_t b, std::function<void()> then) {
  add_copy(self, config, b, [then](bool) { then(); });
}

void fill_chain(self_ptr self, const job_config& config, uint32_t b, std::function<void()> then) {
  auto& home = self->state.ps->directory.homes[b];
  if (home.adding) {  // counted again once that addition is done
    home.after_adding.push_back([=] { fill_chain(self, config, b, then); });
    return;
  }
  if (home.backups.size() + 1 >= config.opts.replication) return then();
  add_copy(self, config, b, [=](bool ok) {
    if (!ok) return then();
    fill_chain(self, config, b, then);
  });
}

void take_over_from(self_ptr self, const job_config& config, size_t s, const std::string& what) {
  auto& st = self->state;
  const auto server = static_cast<uint32_t>(s);
  for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) {
    auto& home = st.ps->directory.homes[b];
    if (home.primary_server == server) {
      const auto live = std::find_if(home.backups.begin(), home.backups.end(), [&](const auto& c) {
        return !st.ps->roster.server_members[c.server].lost;
      });
      if (live == home.backups.end())
        return fail_job(self, config, fmt::format("{}; bucket {} had no live backup", what, b));
      promote(self, config, b, static_cast<size_t>(live - home.backups.begin()));
    } else if (auto k = home.backup_on(server)) {
      // The copy before it may not hear of the loss itself (CAF 0.17 routes between servers
      // through this node and tells nobody when a route breaks): what it holds for the lost
      // copy is acknowledged once it is told where to forward.
      remove_backup(self, config, b, home.backups[*k].handle);
    }
  }
}

void backup_failed(self_ptr self, const job_config& config, uint32_t b,
                   const bucket_actor& reporter, const bucket_actor& failed) {
  auto& st = self->state;
  if (b >= st.ps->directory.homes.size() || !sent_by(self, reporter.address()))
    return config.log.warn("ignored a failed backup that its copy did not report");
  const auto& home = st.ps->directory.homes[b];
  for (size_t k = 0; k < home.backups.size(); ++k)
    if (chain_at(st, b, k) == reporter && home.backups[k].handle == failed) {
      config.log.warn(
          "bucket {}: a copy reports that its backup on '{}' failed; it leaves the "
          "chain",
          b, st.ps->roster.server_members[home.backups[k].server].name);
      return remove_backup(self, config, b, failed);
    }
  // Dealt with already (that copy's server was lost, or it was relinked meanwhile): link the
  // reporter again, so that it hears where to forward whatever it holds.
  // (Not while a new copy is being linked behind it: that link tells it.)
  const auto at = position_of(st, b, reporter);
  if (at && !(home.adding && *at == home.backups.size())) relink(self, config, b, *at);
}

void relink_restarted(self_ptr self, const job_config& config, uint32_t b, size_t k) {
  // The restarted copy (which kept its store) first passes its state on, then takes the state
  // of the copy before it, which its own restore passes down the chain.
  const auto restarted = chain_at(self->state, b, k);
  relink(self, config, b, k, [=] {
    const auto at = position_of(self->state, b, restarted);
    if (at && *at > 0) relink(self, config, b, *at - 1);
  });
}

}  // namespace troupe::ps_plan
