// The coordinator's placement of buckets on servers, recovery from a lost server (promotion
// through replicas.cpp, or a checkpoint), the directory of bucket handles that workers ask
// after a failure, restarted buckets, and fault injection.
#include <fmt/format.h>

#include "actors/bucket/sparse_table.hpp"
#include "actors/ps/ps_plan_parts.hpp"
#include "actors/supervision/supervisors/guards.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "troupe/error.hpp"

namespace troupe::ps_plan {

namespace {

// --buckets, or by default one per server and one per 4 MiB of values where that is more; never
// so few that a bucket outgrows one message (fewest_parts). Each bucket costs a worker one push
// and one pull per step, and on this 2-core machine the fmnist job (0.9 MiB of values) ran
// 5-9% faster with one bucket per server than with two per worker, embedded and across
// processes; the data lane moves 1-64 MiB messages at about the same share of raw TCP.
// --mode diloco: at least one bucket per fragment.
uint32_t bucket_count(const launch_options& o, uint64_t total_values) {
  const uint32_t fewest =
      std::max(fewest_parts(total_values), o.diloco_mode() ? o.diloco.fragments : 1u);
  return std::max(o.buckets ? o.buckets : std::max(o.servers, fewest), fewest);
}

// How many buckets are being placed at once: each one's spec (with its values) is made when it
// is sent, so that the coordinator and a server hold a few buckets' messages, not the model's.
constexpr size_t placing_at_once = 4;

// Bucket b's spec: with its `initial` values, or without them (null) as kept once placed,
// shapes only (a new backup takes its state from the chain, a restored bucket from its parts).
wire spec_of(const coordinator_state& st, const job_config& config, const bucket_placement& b,
             const std::vector<float>* initial) {
  const auto& o = config.opts;
  // --mode hybrid: the tables' clients are the group's members, by join index.
  const uint32_t clients = o.hybrid() ? std::max(o.workers, o.max_workers) : o.workers;
  bucket_spec spec{b.bucket, clients, optimizer_from(o), {}, o.consistency, o.compensation};
  if (initial)
    spec.tensors = gather(*st.ps->directory.layout, b, *initial);
  else
    for (const auto& s : b.slices)
      spec.tensors.push_back(dense_tensor{s.tensor, s.shape, s.row_offset, {}});
  spec.values_follow = !initial;
  for (const auto& t : config.task->sparse_tables())
    spec.tables.push_back(config_of(t));
  spec.bucket_count = static_cast<uint32_t>(st.ps->directory.plan.buckets.size());
  spec.seed = o.seed;
  spec.clip = o.clip;
  spec.sync_threshold = o.sync_threshold;
  spec.export_dir = o.export_dir;
  spec.export_every_s = o.export_every;
  return encode(spec);
}

}  // namespace

// Bucket b is served by `handle` on server s from now on; held which() requests get it.
void set_primary(self_ptr self, uint32_t b, bucket_actor handle, uint32_t s) {
  auto& st = self->state;
  st.ps->directory.buckets[b] = std::move(handle);
  auto& home = st.ps->directory.homes[b];
  home.primary_server = s;
  // Retirements the old actor may not have had (or passed on) reach the new one.
  for (uint32_t r = 0; r < st.ps->roster.worker_members.size(); ++r)
    if (st.ps->roster.worker_members[r].lost || st.ps->roster.worker_members[r].done)
      self->send(st.ps->directory.buckets[b], retire_atom_v, r);
  for (auto& promise : home.waiting) promise.deliver(st.ps->directory.buckets[b]);
  home.waiting.clear();
  auto again = std::move(home.when_served);
  home.when_served.clear();
  for (auto& f : again) f();
}

// Bucket b has a live primary again after a server loss.
void served_again(self_ptr self, const job_config& config, uint32_t b) {
  auto& st = self->state;
  st.ps->directory.homes[b].recovering = false;
  const double took = seconds_since(st.ps->directory.lost_at);
  st.shell.report.recovery_s = std::max(st.shell.report.recovery_s, took);
  if (--st.ps->directory.recovering == 0)
    config.log.info("every bucket is served again, {:.2f} s after the loss", took);
  send_standing(self, config);
  maybe_evaluate(self, config);
}

namespace {

// Sends the checkpoint's parts of bucket b to its new primary, a part at a time, then calls
// `then`.
void restore_bucket(self_ptr self, const job_config& config, uint32_t b,
                    std::function<void()> then) {
  auto& st = self->state;
  const bucket_actor primary = st.ps->directory.buckets[b];
  send_saved_parts(
      self, std::make_shared<const saved_checkpoint>(*st.ps->checkpoints.resume_from), b,
      [=](uint32_t index, uint32_t total, wire part) {
        return self->request(primary, config.opts.request_timeout, restore_atom_v, index, total,
                             std::move(part));
      },
      then,
      [=](const caf::error& err) {
        fail_job(self, config,
                 fmt::format("restoring bucket {} from the checkpoint: {}", b, describe(err)));
      });
}

void place_one(self_ptr self, const job_config& config, uint32_t b);

// Bucket b is placed (with its backups): the next one goes, and once all are, training starts.
void placed_one(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::placing) return;
  auto& directory = st.ps->directory;
  if (directory.next_to_place < directory.buckets.size())
    place_one(self, config, directory.next_to_place++);
  if (++directory.placed < directory.buckets.size()) return;
  std::vector<float>().swap(directory.initial);  // every bucket holds its values now
  if (config.hands_out_buckets()) {
    st.ps->checkpoints.resume_from.reset();  // (hybrid: restored; the dp plan has the rest)
    tables_placed(self, config);
  } else if (st.ps->checkpoints.resume_from)
    start_resumed(self, config);
  else
    start_training(self, config);
}

void place_one(self_ptr self, const job_config& config, uint32_t b) {
  auto& st = self->state;
  const auto& placement = st.ps->directory.plan.buckets[b];
  const uint32_t server = placement.server;
  const bool new_values = !config.service && !st.ps->checkpoints.resume_from;
  wire spec = new_values ? spec_of(st, config, placement, &st.ps->directory.initial)
                         : st.ps->directory.specs[b];
  host_spec(
      self, config, std::move(spec), server,
      [=](bucket_actor& primary) {
        auto& st = self->state;
        if (st.shell.phase != job_phase::placing) return;
        st.ps->directory.buckets[b] = std::move(primary);
        st.ps->directory.homes[b].primary_server = server;
        auto backed_up = [=] { fill_chain(self, config, b, [=] { placed_one(self, config); }); };
        if (st.ps->checkpoints.resume_from)
          restore_bucket(self, config, b, backed_up);
        else
          backed_up();
      },
      [=](caf::error& err) {
        fail_job(self, config, fmt::format("placing bucket {}: {}", b, describe(err)));
      });
}

// Without a backup, server s's buckets come back from the newest good checkpoint on live
// servers; the pushes acknowledged since then are lost and counted. Async only: under ssp and
// bsp the restored clocks would hold the workers back forever.
void restore_from_checkpoint(self_ptr self, const job_config& config, size_t s,
                             const std::string& what) {
  auto& st = self->state;
  if (config.opts.consistency.type != consistency_config::mode::async)
    return fail_job(self, config,
                    what +
                        "; restoring buckets from a checkpoint mid-job needs --consistency async "
                        "(or --replication 2)");
  // Only checkpoints this job wrote: the directory may hold another run's.
  std::optional<saved_checkpoint> saved;
  const auto& written = st.shell.checkpoints.written;
  for (auto path = written.rbegin(); path != written.rend(); ++path) {
    auto c = saved_checkpoint::open(*path);
    if (c) {
      saved = std::move(*c);
      break;
    }
    config.log.warn("skipping a damaged checkpoint: {}", describe(c.error()));
  }
  if (!saved)
    return fail_job(self, config,
                    what + "; this job has no checkpoint to restore its buckets from");
  auto it = st.ps->checkpoints.chunks_at_step.find(saved->job.step);
  const uint64_t since = st.ps->checkpoints.chunks_done -
                         (it == st.ps->checkpoints.chunks_at_step.end() ? 0 : it->second);
  st.ps->checkpoints.resume_from = std::move(*saved);
  config.log.warn(
      "{}; restoring its buckets from the checkpoint at step {} ({} updates each are lost)", what,
      st.ps->checkpoints.resume_from->job.step, since);
  for (uint32_t b = 0; b < st.ps->directory.homes.size(); ++b) {
    if (st.ps->directory.homes[b].primary_server != s) continue;
    const auto server = server_for_copy(st, b);
    if (!server) return fail_job(self, config, what + "; no live server is left for its buckets");
    st.shell.report.updates_lost += since;
    st.ps->directory.homes[b].recovering = true;
    ++st.ps->directory.recovering;
    auto spec = st.ps->checkpoints.resume_from->part(b, 0);
    if (!spec) return fail_job(self, config, what + "; the checkpoint: " + describe(spec.error()));
    st.ps->directory.specs[b] = std::move(*spec);
    host_bucket(
        self, config, b, *server,
        [=](bucket_actor& handle) {
          self->state.ps->directory.buckets[b] = handle;  // restore_bucket sends the parts there
          restore_bucket(self, config, b, [=] {
            // Workers that joined after the checkpoint take their ranks again, in order.
            auto& st = self->state;
            const auto spec = decode<bucket_spec>(st.ps->directory.specs[b]);
            for (uint32_t r = spec ? spec->workers : 0; r < st.ps->roster.worker_members.size();
                 ++r)
              self->request(handle, config.opts.request_timeout, admit_atom_v, r)
                  .then([](uint64_t) {}, [](caf::error&) {});
            set_primary(self, b, handle, *server);
            served_again(self, config, b);
            if (self->state.ps->directory.recovering == 0)
              self->state.ps->checkpoints.resume_from.reset();
          });
        },
        [=](caf::error& err) {
          fail_job(self, config, fmt::format("restoring bucket {}: {}", b, describe(err)));
        });
  }
}

}  // namespace

// With replication, servers talk to each other: each pair connects directly before any bucket
// is placed, so that a primary's messages to its backup take one hop and one route (CAF keeps
// order on a route, not across a change of route). Then `then` runs.
void connect_servers(self_ptr self, const job_config& config, std::function<void()> then) {
  auto& st = self->state;
  auto pending = std::make_shared<size_t>(1);  // held until every request is out
  auto connected = [=] {
    if (--*pending == 0) then();
  };
  if (config.opts.replication >= 2)
    for (size_t s = 0; s < st.ps->roster.servers.size(); ++s)
      for (size_t t = s + 1; t < st.ps->roster.servers.size(); ++t) {
        const endpoint& peer = st.ps->roster.server_members[t].data;
        if (peer.port == 0 || st.ps->roster.servers[s].node() == st.ps->roster.servers[t].node())
          continue;
        ++*pending;
        self->request(st.ps->roster.servers[s], config.opts.request_timeout, peer_atom_v, peer.host,
                      peer.port)
            .then([=](bool) { connected(); },
                  [=](caf::error& err) {
                    config.log.warn("servers {} and {} talk through this node: {}", s, t,
                                    describe(err));
                    connected();
                  });
      }
  connected();
}

void place_buckets(self_ptr self, const job_config& config) {
  self->state.shell.phase = job_phase::placing;
  connect_servers(self, config, [=] { place_all(self, config); });
}

caf::error lay_out_buckets(self_ptr self, const job_config& config, bool new_values) {
  auto& st = self->state;
  const auto& o = config.opts;
  if (config.service) {  // an app's service: its buckets come ready-made
    st.ps->directory.layout.emplace(config.service->tensors);
    st.ps->directory.plan = config.service->plan;
    st.ps->directory.specs = config.service->specs;
    st.ps->directory.buckets.resize(st.ps->directory.specs.size());
    st.ps->directory.homes.resize(st.ps->directory.specs.size());
    return {};
  }
  // --mode hybrid: the dense parameters are the group's; the buckets hold rows only.
  st.ps->directory.layout.emplace(o.hybrid() ? std::vector<tensor_spec>{}
                                             : config.task->parameters());
  const uint32_t count = bucket_count(o, st.ps->directory.layout->total);
  st.ps->directory.plan = plan_buckets(*st.ps->directory.layout, count,
                                       static_cast<uint32_t>(st.ps->roster.servers.size()));
  if (o.diloco_mode() && st.ps->directory.plan.buckets.size() < o.diloco.fragments)
    return make_error(errc::bad_configuration,
                      fmt::format("--fragments {}: the model fills only {} buckets, and a "
                                  "fragment is a group of them",
                                  o.diloco.fragments, st.ps->directory.plan.buckets.size()));
  if (auto err = check_resume(st, config)) return err;
  auto& initial = st.ps->directory.initial;
  if (new_values && !st.ps->checkpoints.resume_from &&
      st.ps->directory.layout->total > 0) {  // (hybrid: rows only)
    initial.resize(st.ps->directory.layout->total);
    config.task->initialize(o.seed, initial);
    if (!kernels::all_finite(initial))  // (a Python task's initialize that raised leaves NaN)
      return make_error(errc::task_failed, "the task's initialize left values that are not finite");
  }
  const auto n = st.ps->directory.plan.buckets.size();
  st.ps->directory.buckets.resize(n);
  st.ps->directory.homes.resize(n);
  st.ps->directory.specs.resize(n);
  for (const auto& b : st.ps->directory.plan.buckets) {
    if (!st.ps->checkpoints.resume_from) {
      st.ps->directory.specs[b.bucket] = spec_of(st, config, b, nullptr);
      continue;
    }
    auto spec = st.ps->checkpoints.resume_from->part(b.bucket, 0);
    if (!spec) return std::move(spec.error());
    st.ps->directory.specs[b.bucket] = std::move(*spec);
  }
  return {};
}

void place_all(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.phase != job_phase::placing) return;
  if (auto err = lay_out_buckets(self, config, true)) return fail_job(self, config, describe(err));
  const auto n = static_cast<uint32_t>(st.ps->directory.buckets.size());
  st.ps->directory.next_to_place = std::min<uint32_t>(n, placing_at_once);
  for (uint32_t b = 0; b < st.ps->directory.next_to_place; ++b) place_one(self, config, b);
}

void lose_server(self_ptr self, const job_config& config, size_t s, const std::string& why) {
  auto& st = self->state;
  auto& m = st.ps->roster.server_members[s];
  m.lost = true;
  m.draining = false;  // a drain under way ends with the loss
  forget_member(self, m.name);
  record_loss(st, m, role::server, why);
  // One declared lost while still running (frozen, cut off) must not serve again.
  if (st.ps->roster.servers[s])  // (one that did not rejoin a takeover has no handle here)
    self->request(st.ps->roster.servers[s], config.opts.request_timeout, stop_atom_v,
                  "declared lost: " + why)
        .then([](bool) {}, [](caf::error&) {});
  const std::string what = fmt::format("lost server '{}' ({})", m.name, why);
  if (st.shell.phase != job_phase::training) return fail_job(self, config, what);
  if (config.opts.replication < 2 && config.opts.checkpoint_dir.empty())
    return fail_job(
        self, config,
        what + (config.service ? "; its buckets are gone (a service's replication 2 "
                                 "keeps a backup of each)"
                               : "; its buckets are gone (--replication 2 keeps a backup "
                                 "of each; --checkpoint-dir restores them from the last "
                                 "checkpoint)"));
  st.ps->directory.lost_at = std::chrono::steady_clock::now();
  // An evaluation pulling from the lost server would wait for its timeout: start it again.
  ++st.ps->evaluation.round;
  st.ps->evaluation.running = false;
  if (config.opts.replication < 2) return restore_from_checkpoint(self, config, s, what);
  config.log.warn("{}; its buckets' backups take over", what);
  take_over_from(self, config, s, what);
  send_standing(self, config);
}

void hand_over_server(self_ptr self, const job_config& config, size_t s) {
  auto& st = self->state;
  auto& m = st.ps->roster.server_members[s];
  m.lost = m.drained = true;
  m.draining = false;
  forget_member(self, m.name);
  st.shell.report.drained.push_back(m.name);
  note_event(st.shell.timeline, training_seconds(st), "drain", "server " + m.name);
  st.ps->directory.lost_at = std::chrono::steady_clock::now();
  ++st.ps->evaluation.round;
  st.ps->evaluation.running = false;
  self->request(st.ps->roster.servers[s], config.opts.request_timeout, stop_atom_v, "")
      .then([](bool) {}, [](caf::error&) {});
  config.log.info("drained server '{}': its buckets' copies take over", m.name);
  take_over_from(self, config, s, "drained server '" + m.name + "'");
}

caf::result<bucket_actor> which(self_ptr self, uint32_t bucket, const bucket_actor& failed) {
  auto& st = self->state;
  if (bucket >= st.ps->directory.buckets.size())
    return make_error(errc::unknown_bucket, fmt::format("there is no bucket {}", bucket));
  auto& home = st.ps->directory.homes[bucket];
  // (While a takeover waits for its servers, a bucket may have no handle yet.)
  if (!home.recovering && st.ps->directory.buckets[bucket] &&
      st.ps->directory.buckets[bucket] != failed)
    return st.ps->directory.buckets[bucket];
  if (home.waiting.size() >= max_waiting)
    return make_error(errc::message_too_large, "too many requests wait for this bucket");
  home.waiting.push_back(self->make_response_promise<bucket_actor>());
  return home.waiting.back();
}

void moved(self_ptr self, const job_config& config, uint32_t b, bucket_actor handle) {
  auto& st = self->state;
  size_t s = 0;
  while (s < st.ps->roster.server_members.size() &&
         !sent_by(self, st.ps->roster.server_members[s].address))
    ++s;
  if (s == st.ps->roster.server_members.size() || b >= st.ps->directory.buckets.size() ||
      st.ps->roster.server_members[s].lost)
    return config.log.warn("ignored a moved bucket that is not from its server");
  auto& home = st.ps->directory.homes[b];
  ++st.shell.report.restarts;
  add(st.shell.metrics.restarts, 1);
  note_event(st.shell.timeline, training_seconds(st), "restart",
             fmt::format("bucket {}, by its server's supervisor", b));
  if (home.primary_server == s && !home.recovering) {
    config.log.warn("bucket {} was restarted by its server's supervisor", b);
    ++home.primary_restarts;
    set_primary(self, b, std::move(handle), static_cast<uint32_t>(s));
    // The new primary actor does not know its backup yet; the store kept the values.
    relink_restarted(self, config, b, 0);
  } else if (auto k = home.backup_on(static_cast<uint32_t>(s))) {
    config.log.warn("a backup of bucket {} was restarted; bringing it up to date", b);
    ++home.backups[*k].restarts;
    home.backups[*k].handle = std::move(handle);
    relink_restarted(self, config, b, *k + 1);
  }
}

caf::expected<std::string> inject_fault(self_ptr self, const std::string& name) {
  auto& st = self->state;
  const std::string prefix = "bucket-";
  if (name.rfind(prefix, 0) == 0 && st.shell.phase == job_phase::training) {
    uint32_t b = 0;
    try {
      b = static_cast<uint32_t>(std::stoul(name.substr(prefix.size())));
    } catch (const std::exception&) {
      b = UINT32_MAX;
    }
    if (b >= st.ps->directory.buckets.size())
      return make_error(errc::bad_configuration, fmt::format("there is no {}", name));
    self->send(st.ps->directory.buckets[b], fault_atom_v);
    return fmt::format("crashed {} (primary on '{}')", name,
                       st.ps->roster.server_members[st.ps->directory.homes[b].primary_server].name);
  }
  for (size_t i = 0; i < st.ps->roster.server_members.size(); ++i)
    if (st.ps->roster.server_members[i].name == name && !st.ps->roster.server_members[i].lost) {
      self->send(st.ps->roster.servers[i], fault_atom_v);
      return "crashed server " + name;
    }
  for (size_t i = 0; i < st.ps->roster.worker_members.size(); ++i)
    if (st.ps->roster.worker_members[i].name == name && !st.ps->roster.worker_members[i].lost) {
      self->send(st.ps->roster.workers[i], fault_atom_v);
      return "crashed worker " + name;
    }
  return make_error(errc::bad_configuration,
                    "no running actor named '" + name + "' (bucket-N or a node's name)");
}

}  // namespace troupe::ps_plan
