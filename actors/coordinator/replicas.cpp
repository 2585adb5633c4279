// The coordinator's replicas of buckets (--replication 2): where a backup goes, linking a
// backup to its primary, promoting a backup when its primary's server is lost, making new
// backups, and telling a primary to go on without one. Only the coordinator decides who
// holds a bucket: a primary whose backup fails holds its acknowledgements until told here.
#include <fmt/format.h>

#include "actors/coordinator/coordinator_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::coordination {

namespace {

// The backup of bucket b becomes its primary; a new backup is made on another live server.
void promote(self_ptr self, const coordinator_config& config, uint32_t b) {
  auto& st = self->state;
  auto& home = st.directory.homes[b];
  home.recovering = true;
  ++st.directory.recovering;
  const auto backup = *home.backup;
  const uint32_t server = home.backup_server;
  home.backup.reset();
  home.primary_restarts = home.backup_restarts;  // the backup is the primary from now on
  home.backup_restarts = 0;
  self->request(backup, config.opts.request_timeout, promote_atom_v)
      .then(
          [=](bool) {
            set_primary(self, b, backup, server);
            served_again(self, config, b);
            // A copy made only to drain a server (--replication 1) has none after it.
            if (config.opts.replication >= 2) add_backup(self, config, b, [] {});
          },
          [=](caf::error& err) {
            fail(self, config,
                 fmt::format("promoting the backup of bucket {}: {}", b, describe(err)));
          });
}

}  // namespace

// The live server other than `not_this`, and not being drained, that holds the fewest copies;
// none if there is none.
std::optional<uint32_t> backup_server_for(const coordinator_state& st, uint32_t not_this) {
  std::vector<size_t> load(st.roster.servers.size(), 0);
  for (const auto& h : st.directory.homes) {
    ++load[h.primary_server];
    if (h.backup) ++load[h.backup_server];
  }
  std::optional<uint32_t> best;
  for (uint32_t s = 0; s < st.roster.servers.size(); ++s)
    if (s != not_this && !st.roster.server_members[s].lost &&
        !st.roster.server_members[s].draining && (!best || load[s] < load[*best]))
      best = s;
  return best;
}

// Names `primary` to `backup` (which then takes state only from it), then has the primary
// copy its state there and forward from then on; `done` or `failed` runs after.
template <class Done, class Failed>
void link_backup(self_ptr self, const coordinator_config& config, const bucket_actor& primary,
                 const bucket_actor& backup, Done done, Failed failed) {
  const auto timeout = config.opts.request_timeout;
  self->request(backup, timeout, primary_atom_v, caf::actor_cast<caf::actor>(primary))
      .then(
          [=](bool) {
            self->request(primary, timeout, backup_atom_v, caf::actor_cast<caf::actor>(backup))
                .then(done, failed);
          },
          failed);
}

// Tells bucket b's primary to go on without a backup: one that held its acknowledgements for a
// failed backup sends them now (only the coordinator may decide that a copy will never be
// promoted).
void go_on_without_backup(self_ptr self, const coordinator_config& config, uint32_t b) {
  self->request(self->state.directory.buckets[b], config.opts.request_timeout, backup_atom_v,
                caf::actor{})
      .then([](bool) {}, [](caf::error&) {});
}

// Makes a new backup of bucket b on another live server; `then` runs once it holds the state
// (or, when no backup can be made, right away: the bucket goes on with one copy).
void add_backup(self_ptr self, const coordinator_config& config, uint32_t b,
                std::function<void()> then) {
  auto& st = self->state;
  const auto s = backup_server_for(st, st.directory.homes[b].primary_server);
  if (!s) {
    config.log.warn("bucket {} has no backup: no other live server", b);
    go_on_without_backup(self, config, b);
    return then();
  }
  auto give_up = [=](caf::error& err) {
    config.log.warn("bucket {} has no backup: {}", b, describe(err));
    go_on_without_backup(self, config, b);
    then();
  };
  host_bucket(
      self, config, b, *s,
      [=](bucket_actor& backup) {
        const auto primary = self->state.directory.buckets[b];
        link_backup(
            self, config, primary, backup,
            [=](bool) {
              // A primary restarted meanwhile does not know this backup: make another.
              if (self->state.directory.buckets[b] != primary)
                return add_backup(self, config, b, then);
              // Its server was lost or is being drained meanwhile: drop it, make another.
              const auto& host = self->state.roster.server_members[*s];
              if (host.lost || host.draining) {
                go_on_without_backup(self, config, b);
                return add_backup(self, config, b, then);
              }
              auto& home = self->state.directory.homes[b];
              home.backup = backup;
              home.backup_restarts = 0;
              home.backup_server = *s;
              config.log.debug("bucket {}: backup on server {}", b, *s);
              then();
            },
            give_up);
      },
      give_up);
}

// Server s is gone: the backups of its primaries take over, its backups are made anew.
void take_over_from(self_ptr self, const coordinator_config& config, size_t s,
                    const std::string& what) {
  auto& st = self->state;
  for (uint32_t b = 0; b < st.directory.homes.size(); ++b) {
    auto& home = st.directory.homes[b];
    if (home.primary_server == s) {
      if (!home.backup || st.roster.server_members[home.backup_server].lost)
        return fail(self, config, fmt::format("{}; bucket {} had no live backup", what, b));
      promote(self, config, b);
    } else if (home.backup && home.backup_server == s) {
      // The primary may not hear of the loss itself (CAF 0.17 routes between servers through
      // this node and tells nobody when a route breaks): pushes waiting for the lost backup
      // are acknowledged once it is dropped.
      home.backup.reset();
      go_on_without_backup(self, config, b);
      add_backup(self, config, b, [] {});
    }
  }
}

// Tells bucket b's primary to keep `backup` (sending it the whole state first).
void relink_backup(self_ptr self, const coordinator_config& config, uint32_t b,
                   bucket_actor backup) {
  auto& st = self->state;
  link_backup(
      self, config, st.directory.buckets[b], backup, [](bool) {},
      [=](caf::error& err) {
        config.log.warn("bucket {} lost its backup: {}", b, describe(err));
        auto& home = self->state.directory.homes[b];
        if (home.backup == backup) {
          home.backup.reset();
          add_backup(self, config, b, [] {});
        }
      });
}

}  // namespace troupe::coordination
