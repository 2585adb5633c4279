#include "actors/bucket/parameter_bucket.hpp"

#include <functional>

#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = bucket_actor::stateful_pointer<bucket_actor_state>;

// Messages bigger than any honest push for this bucket are refused before decoding. (With
// embedding tables a push also carries rows: then the codec's own caps apply.) The codec does
// not look for NaN and Inf: bucket_store::apply bounds every value it takes (max_abs_gradient,
// which they fail), in the pass that sums the squares, so that pass is the only one.
void size_limits(bucket_actor_state& st) {
  st.limits = codec_limits{};
  st.limits.require_finite = false;
  uint64_t values = 0;
  for (const auto& s : st.store->slices()) values += s.values.size();
  if (!st.store->has_tables()) st.limits.max_elements = std::max<uint64_t>(values, 1);
}

reply_form form_for(const wire& request) {
  if (request.local) return reply_form::local;
  return request.reply_unwritten ? reply_form::unwritten : reply_form::encoded;
}

// The tables' counters into their metrics.
void publish_tables(bucket_actor_state& st) {
  const auto& series = st.metrics.tables;
  if (series.empty()) return;
  const auto tables = st.store->tables_counted();
  for (size_t t = 0; t < series.size() && t < tables.size(); ++t) {
    const auto& c = tables[t];
    set(series[t].rows, double(c.rows));
    set(series[t].evicted, double(c.rows_evicted));
    set(series[t].not_admitted, double(c.ids_not_admitted));
    set(series[t].dropped, double(c.grads_dropped));
  }
}

// Tells the backup what a worker read (so that its compensation memory and its tables' rows
// stay the same), with the rows this read evicted, which the backup evicts first.
void mirror_read(self_ptr self, pull_request request) {
  auto& st = self->state;
  request.evicted = st.store->take_evictions();
  publish_tables(st);
  if (st.backup && request.worker != observer_worker)
    self->send(*st.backup, mirror_atom_v, encode(request));
}

// The reply to an allowed pull: the bucket's values and the embedding rows asked for.
caf::expected<wire> answer(self_ptr self, const pull_request& request, reply_form form) {
  auto& st = self->state;
  auto [reply, whole] = st.store->grant(request.worker, request.worker_clock);
  if (st.exporter && !st.primary && request.worker != observer_worker) st.exporter->served();
  caf::expected<std::vector<sparse_rows>> rows{std::vector<sparse_rows>{}};
  if (!request.rows.empty()) rows = st.store->read_rows(request.rows, request.worker);
  mirror_read(self, request);
  if (!rows) return std::move(rows.error());
  reply.rows = std::move(*rows);
  wire out;
  if (form == reply_form::local) {  // a copy of the values, handed over as it is
    if (whole) reply.tensors = st.store->slices();
    out = local_wire(std::move(reply));
  } else if (form == reply_form::unwritten && whole) {  // the slices, referenced where they are
    out.unwritten = encode_unwritten(reply, st.store->slices());
  } else {  // encoded from the slices themselves: the message holds the only copy
    out = encode(reply, whole ? st.store->slices() : reply.tensors);
  }
  add(st.metrics.bytes_out, double(out.unwritten ? out.unwritten->size() : out.bytes.size()));
  return out;
}

// The reply to a request, in the form the request came: local or encoded.
template <class T>
wire reply_like(const wire& request, T reply) {
  return request.local ? local_wire(std::move(reply)) : encode(reply);
}

bool is_not_primary(const caf::error& err) {
  return has_code(err, errc::not_primary);
}

// Answers `promise` with the value, or with the error.
template <class T>
void deliver(caf::typed_response_promise<T>& promise, caf::expected<T> reply) {
  if (reply)
    promise.deliver(std::move(*reply));
  else
    promise.deliver(std::move(reply.error()));
}

// Answers every held pull that the clocks now allow.
void release_held_pulls(self_ptr self) {
  auto& st = self->state;
  std::erase_if(st.held, [&](held_pull& p) {
    if (!st.store->pull_allowed(p.request.worker, p.request.worker_clock)) return false;
    deliver(p.promise, answer(self, p.request, p.form));
    return true;
  });
}

caf::result<wire> on_pull(self_ptr self, const wire& w) {
  if (self->state.deposed) return make_error(errc::not_primary, "a backup took over this bucket");
  auto request = decode<pull_request>(w);
  if (!request) return std::move(request.error());
  auto& st = self->state;
  auto& store = *st.store;
  if (request->bucket != store.id())
    return make_error(errc::unknown_bucket, "pull for bucket " + std::to_string(request->bucket) +
                                                " reached bucket " + std::to_string(store.id()));
  if (request->worker != observer_worker && request->worker >= store.workers())
    return make_error(errc::malformed_message, "pull from an unknown worker");
  const auto form = form_for(w);
  if (store.pull_allowed(request->worker, request->worker_clock)) {
    auto reply = answer(self, *request, form);
    if (!reply) return std::move(reply.error());
    return std::move(*reply);
  }
  for (const auto& p : st.held)
    if (p.request.worker == request->worker)
      return make_error(errc::malformed_message, "a pull of this worker is already waiting");
  auto promise = self->make_response_promise<wire>();
  st.held.push_back(held_pull{promise, std::move(*request), form});
  return promise;
}

void deliver(awaiting_backup& a) {
  deliver(a.promise, std::move(a.reply));
}

// Acknowledges the pushes forwarded up to `seq`: a backup, or a state copy, has them.
void acknowledge_through(self_ptr self, uint64_t seq) {
  auto& awaiting = self->state.awaiting;
  for (auto it = awaiting.begin(); it != awaiting.end() && it->first <= seq;) {
    deliver(it->second);
    it = awaiting.erase(it);
  }
}

void acknowledge(self_ptr self, uint64_t seq) {
  if (auto it = self->state.awaiting.find(seq); it != self->state.awaiting.end()) {
    deliver(it->second);
    self->state.awaiting.erase(it);
  }
}

// The backup stopped answering (its actor went down, a forward or the state copy failed). The
// primary holds every acknowledgement it owes from here on until the coordinator, which alone
// decides who holds a bucket, drops the backup (its server was declared lost, so it will never
// be promoted) or names a new one (whose state copy holds every held push); it is told of the
// failure, so that a backup that is only slow is taken out of the chain too. Acknowledging
// alone could lose updates: a primary cut off from the coordinator and its backup, but not
// from the workers, is about to be replaced by that very backup. (At most one push per worker
// is outstanding, so what is held is bounded.)
void hold_for_backup(self_ptr self, const bucket_actor_config& config, const caf::error& why) {
  auto& st = self->state;
  if (!st.backup) return;
  config.log.warn(
      "bucket {}: its backup failed ({}); holding acknowledgements until the coordinator drops "
      "it or names another",
      st.store->id(), describe(why));
  self->demonitor(st.backup->address());
  self->send(config.controller->handle(), backup_atom_v, st.store->id(),
             caf::actor_cast<bucket_actor>(self), *st.backup);
  st.backup.reset();
  st.holding = true;
}

// The coordinator dropped the backup: the primary goes on alone, and what it held goes out.
void drop_backup(self_ptr self, const bucket_actor_config& config) {
  auto& st = self->state;
  if (st.backup) self->demonitor(st.backup->address());
  if (st.backup || st.holding)
    config.log.warn("bucket {}: going on without a backup (the coordinator dropped it)",
                    st.store->id());
  st.backup.reset();
  st.holding = false;
  acknowledge_through(self, st.forwarded);
}

// Its backup was promoted in its place: it serves nobody, and every push it holds is refused
// so that the workers resend them to the new primary at once.
void step_down(self_ptr self, const bucket_actor_config& config, const caf::error& why) {
  auto& st = self->state;
  config.log.error("bucket {}: its backup was promoted; stepping down", st.store->id());
  st.deposed = true;
  if (st.exporter) st.exporter->stop();
  for (auto& [seq, a] : st.awaiting) a.reply = why;
  acknowledge_through(self, st.forwarded);
}

using device_clock = std::chrono::steady_clock;

// Until when a push (all its DASH steps) may wait for the device: well inside the request
// timeout, so that a hung GPU costs a push a fraction of it rather than the worker's whole
// wait (and a backup's, whose primary would drop it).
device_clock::time_point device_deadline(const bucket_actor_config& config) {
  return device_clock::now() +
         std::max(
             std::chrono::milliseconds(1000),
             std::chrono::duration_cast<std::chrono::milliseconds>(config.request_timeout) / 4);
}

// After a device failure, this many pushes step on the CPU before the device is tried again.
constexpr uint32_t device_backoff_pushes = 100;

// Steps the DASH work the store deferred on the device, oldest first, then calls `next`. Each
// step is awaited: no other message is handled meanwhile, so nothing reads (or saves, or
// forwards) half-stepped parameters. A failure steps the rest on the CPU, and so do the next
// device_backoff_pushes pushes.
void step_deferred_dash(self_ptr self, const bucket_actor_config& config,
                        device_clock::time_point deadline, std::function<void()> next) {
  auto& store = *self->state.store;
  if (!store.dash_pending()) return next();
  auto on_cpu = [self, config, next](const caf::error& why) {
    auto& st = self->state;
    add(st.metrics.device_failures, 1);
    if (st.device_failures++ % 100 == 0)
      config.log.warn("bucket {}: the GPU failed a DASH step ({}; {} so far): the CPU steps it",
                      st.store->id(), describe(why), st.device_failures);
    st.store->defer_dash(false);  // steps what is deferred, here
    st.device_backoff = device_backoff_pushes;
    next();
  };
  if (!config.dash_device) return on_cpu(make_error(errc::device_failure, "no DASH device"));
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - device_clock::now());
  if (left.count() <= 0)
    return on_cpu(make_error(errc::timeout, "the push's time for the device ran out"));
  auto job = std::make_shared<kernels::packed_dash_step>(store.pack_deferred_dash());
  self->request(*config.dash_device, left, run_atom_v, std::move(job))
      .await(
          [self, config, deadline, next, on_cpu](const dash_job& done) {
            if (auto err = self->state.store->complete_deferred_dash(*done)) return on_cpu(err);
            add(self->state.metrics.device_steps, 1);
            step_deferred_dash(self, config, deadline, next);
          },
          [on_cpu](caf::error& err) { on_cpu(err); });
}

// Sends the DASH steps of slices the GPU can step to the device, if there is one.
void use_dash_device(self_ptr self, const bucket_actor_config& config) {
  auto& store = *self->state.store;
  if (!config.dash_device) return;
  const bool any = store.defer_dash(true);
  if (!any) store.defer_dash(false);
  if (store.device_slices() < store.dash_slices() && !self->state.told_cpu_slices++)
    config.log.warn(
        "bucket {}: {} of {} DASH slices stay on the CPU: the GPU steps coupled-Newton roots "
        "with power scaling, in packages of at most {} MiB",
        store.id(), store.dash_slices() - store.device_slices(), store.dash_slices(),
        kernels::max_packed_bytes >> 20);
}

// Counts an applied push against the device's backoff; after the last one, the device gets
// another try.
void count_backoff(self_ptr self, const bucket_actor_config& config) {
  auto& st = self->state;
  if (st.device_backoff > 0 && --st.device_backoff == 0) use_dash_device(self, config);
}

// A push's reply once it is applied (DASH steps included): at once, or once the backup has it
// (or, while the primary holds for a failed backup, once the coordinator decided).
void finish_push(self_ptr self, const wire& w, const bucket_actor_config& config,
                 caf::expected<push_ack> ack, caf::typed_response_promise<wire> promise) {
  auto& st = self->state;
  if (!st.backup && !st.holding) {
    release_held_pulls(self);
    deliver(promise, ack ? caf::expected<wire>{reply_like(w, *ack)} : std::move(ack.error()));
    return;
  }
  // Acknowledged once the backup has it too (a refusal only once the backup counted it).
  const uint64_t seq = ++st.forwarded;
  st.awaiting.emplace(seq,
                      awaiting_backup{promise, ack ? caf::expected<wire>{reply_like(w, *ack)}
                                                   : caf::expected<wire>{std::move(ack.error())}});
  if (st.backup) {
    const auto backup = *st.backup;
    const bool near = backup.node() == self->node();
    self->request(backup, config.request_timeout, push_atom_v, near ? w : encoded(w))
        .then([=](const wire&) { acknowledge(self, seq); },
              [=](caf::error& err) {
                auto& st = self->state;
                // Replaced by its backup (only the current one can say so: a copy that has
                // left the chain refuses for its own reasons).
                if (is_not_primary(err)) {
                  if (st.backup == backup) step_down(self, config, err);
                  return;
                }
                // The backup refusing a push this bucket refused too is agreement.
                const auto it = st.awaiting.find(seq);
                if (err.category() == error_category &&
                    (it == st.awaiting.end() || !it->second.reply))
                  return acknowledge(self, seq);
                // A newer backup's state copy holds the push; else the coordinator decides.
                if (st.backup == backup) hold_for_backup(self, config, err);
              });
  }
  // Only now: pulls this push releases are mirrored to the backup after the push itself.
  release_held_pulls(self);
}

caf::result<wire> on_push(self_ptr self, const wire& w, const bucket_actor_config& config) {
  auto& st = self->state;
  auto& store = *st.store;
  // A promoted backup takes nothing more from its former primary (a late forward, or a primary
  // declared lost that is still running): workers resend to it directly.
  if (st.former_primary && sent_by(self, st.former_primary))
    return make_error(errc::not_primary, "this bucket was promoted; resend here");
  if (st.deposed) return make_error(errc::not_primary, "a backup took over this bucket");
  if (st.primary && !sent_by(self, st.primary))
    return make_error(errc::not_primary, "this is a backup: it takes pushes from its primary");
  // The gradient is read where the message holds it (w outlives the apply).
  std::vector<std::span<const float>> gradient;
  auto push = decode_push_in_place(w, st.limits, gradient);
  if (!push) {
    store.count_rejected();
    config.log.warn("rejected a push: {}", describe(push.error()));
    return std::move(push.error());
  }
  const uint64_t duplicates = store.duplicate_pushes();
  auto ack = store.apply(std::move(*push), std::move(gradient));
  if (!ack) config.log.warn("rejected a push: {}", describe(ack.error()));
  if (ack) count_backoff(self, config);
  auto& m = st.metrics;
  add(m.bytes_in, double(w.bytes.size()));
  const bool duplicate = store.duplicate_pushes() > duplicates;
  add(!ack ? m.rejected : duplicate ? m.duplicates : m.updates, 1);
  if (ack && !duplicate && m.staleness) m.staleness->observe(double(ack->staleness));
  set(m.mailbox, double(self->mailbox().size()));
  if (ack) set(m.variance, store.update_variance());
  if (ack) publish_tables(st);
  auto promise = self->make_response_promise<wire>();
  if (!store.dash_pending()) {
    finish_push(self, w, config, std::move(ack), promise);
  } else {
    step_deferred_dash(self, config, device_deadline(config), [self, w, config, ack, promise]() {
      finish_push(self, w, config, ack, promise);
    });
  }
  return promise;
}

caf::result<bool> copy_state_to(self_ptr self, const bucket_actor_config& config,
                                const bucket_actor& backup);

// A part of saved state; the last one replaces the whole store.
caf::result<bool> on_restore(self_ptr self, const bucket_actor_config& config, uint32_t index,
                             uint32_t total, const wire& part) {
  auto& st = self->state;
  // Only the coordinator (a checkpoint) or the primary it assigned (a backup's first copy)
  // may replace the whole state.
  if (!sent_by(self, config.controller->address()) && !(st.primary && sent_by(self, st.primary)))
    return make_error(errc::authentication_failed,
                      "state comes from the coordinator or this backup's assigned primary only");
  if (index == 0) st.incoming.clear();
  if (total == 0 || index != st.incoming.size() || index >= total || total > (1u << 20))
    return make_error(errc::malformed_message, "state parts out of order");
  st.incoming.push_back(part);
  if (index + 1 < total) return true;
  auto restored = bucket_store::restore(st.incoming, st.store->rules());
  st.incoming.clear();
  if (!restored) return std::move(restored.error());
  if (restored->id() != st.store->id())
    return make_error(errc::unknown_bucket, "the state of another bucket");
  *st.store = std::move(*restored);
  if (st.exporter) st.exporter->snapshot_next();  // the rows it held before may be gone
  if (st.device_backoff == 0) use_dash_device(self, config);
  size_limits(st);
  config.log.debug("bucket {} restored from {} parts", st.store->id(), total);
  // A copy in the middle of a chain passes the state down before it answers the last part.
  if (st.backup) return copy_state_to(self, config, *st.backup);
  return true;
}

// Sends this bucket's whole state to its backup `backup`; the answer comes once every part is
// in (and, since a backup passes a restored state down its own chain first, once every copy
// after it has it too). Then every push the copy holds is acknowledged.
caf::result<bool> copy_state_to(self_ptr self, const bucket_actor_config& config,
                                const bucket_actor& backup) {
  auto& st = self->state;
  const auto parts = st.store->save();
  const uint64_t copied_through = st.forwarded;
  const auto total = static_cast<uint32_t>(parts.size());
  auto promise = self->make_response_promise<bool>();
  auto pending = std::make_shared<uint32_t>(total);
  for (uint32_t i = 0; i < total; ++i)
    self->request(backup, config.request_timeout, restore_atom_v, i, total, parts[i])
        .then(
            [=](bool) mutable {
              if (*pending == 0 || --*pending > 0) return;
              acknowledge_through(self, copied_through);
              promise.deliver(true);
            },
            [=](caf::error& err) mutable {
              if (self->state.backup == backup) hold_for_backup(self, config, err);
              if (*pending != 0) promise.deliver(std::move(err));
              *pending = 0;
            });
  return promise;
}

// Makes `target` this bucket's backup: sends it the whole state, then forwards from there. No
// target: the coordinator drops the backup.
caf::result<bool> on_backup(self_ptr self, const bucket_actor_config& config, caf::actor target) {
  auto& st = self->state;
  auto backup = caf::actor_cast<bucket_actor>(target);
  if (!backup) {  // the coordinator found the backup's server lost
    drop_backup(self, config);
    return true;
  }
  auto copied = copy_state_to(self, config, backup);
  if (st.backup) self->demonitor(st.backup->address());
  st.backup = backup;  // messages from here on arrive after the state
  st.holding = false;  // pushes from here on are forwarded to it
  self->monitor(backup);
  return copied;
}

// --export-dir: the writer writes its next file of changed rows (a backup, or a bucket that
// has not served as primary yet, writes nothing: row_exporter::writing), then the next tick is
// due; the last file is written when the bucket ends.
void export_rows(self_ptr self, const bucket_actor_config& config) {
  auto& st = self->state;
  if (st.exporter->writing())
    if (auto err = st.exporter->write_next(*st.store))
      config.log.warn("bucket {}: --export-dir: {}", st.store->id(), describe(err));
  self->delayed_send(self, std::chrono::seconds(st.store->config().export_every_s), tick_atom_v);
}

void start_export(self_ptr self, const bucket_actor_config& config) {
  auto& st = self->state;
  if (st.store->config().export_dir.empty() || !st.store->has_tables()) return;
  st.exporter = std::make_shared<row_exporter>(st.store->config());
  self->attach_functor([exporter = st.exporter, store = st.store, log = config.log] {
    if (!exporter->writing()) return;
    if (auto err = exporter->write_next(*store))
      log.warn("bucket {}: --export-dir, its last file: {}", store->id(), describe(err));
  });
  self->delayed_send(self, std::chrono::seconds(st.store->config().export_every_s), tick_atom_v);
}

// Whether the message came from the coordinator or (for a backup) from its primary.
bool from_controller_or_primary(self_ptr self, const bucket_actor_config& config) {
  return sent_by(self, config.controller->address()) ||
         (self->state.primary && sent_by(self, self->state.primary));
}

}  // namespace

bucket_actor::behavior_type parameter_bucket(self_ptr self, std::shared_ptr<bucket_store> store,
                                             bucket_actor_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.store = std::move(store);
  self->state.metrics =
      bucket_metrics::of(config.metrics, self->state.store->id(), self->state.store->table_names());
  use_dash_device(self, config);
  size_limits(self->state);
  start_export(self, config);
  self->set_down_handler([=](caf::down_msg& msg) {
    const auto& backup = self->state.backup;
    if (backup && msg.source == backup->address()) hold_for_backup(self, config, msg.reason);
  });
  auto refuse = [config](const char* what) {
    config.log.warn("ignored {} that is not from the coordinator", what);
  };
  return {
      [=](pull_atom, const wire& w) { return on_pull(self, w); },
      [=](push_atom, const wire& w) { return on_push(self, w, config); },
      [=](stats_atom) -> wire { return encode(self->state.store->stats()); },
      [=](retire_atom, uint32_t worker) {
        if (!from_controller_or_primary(self, config)) return refuse("a retire");
        if (auto refused = self->state.store->retire(worker))  // may complete a bsp round
          config.log.warn("{}", describe(refused));
        step_deferred_dash(self, config, device_deadline(config), [self, worker] {
          if (self->state.backup) self->send(*self->state.backup, retire_atom_v, worker);
          release_held_pulls(self);
        });
      },
      [=](admit_atom, uint32_t worker) -> caf::result<uint64_t> {
        if (!from_controller_or_primary(self, config))
          return make_error(errc::authentication_failed, "only the coordinator admits workers");
        auto& store = *self->state.store;
        if (worker >= (1u << 16)) return make_error(errc::malformed_message, "too many workers");
        // Ranks join in order, but one whose admission went to a primary lost meanwhile comes
        // again after the next rank's: the ranks before this one are admitted now (their own
        // admission then finds them, as a rejoin).
        while (store.workers() < worker) store.admit(store.workers());
        if (self->state.backup)
          self->request(*self->state.backup, config.request_timeout, admit_atom_v, worker)
              .then([](uint64_t) {}, [](caf::error&) {});
        return store.rejoin(worker);
      },
      [=](fault_atom) {
        if (!sent_by(self, config.controller->address())) return refuse("a fault");
        config.log.warn("bucket {}: crashing on purpose (fault injection)",
                        self->state.store->id());
        self->quit(
            make_error(errc::injected_fault, "bucket " + std::to_string(self->state.store->id())));
      },
      [=](save_atom, uint32_t index) -> caf::result<wire, uint32_t> {
        if (!sent_by(self, config.controller->address()))
          return make_error(errc::authentication_failed, "only the coordinator saves buckets");
        auto& st = self->state;
        if (index == 0) st.saved = st.store->save();
        if (index >= st.saved.size())
          return make_error(errc::malformed_message, "no such part of the saved state");
        const auto total = static_cast<uint32_t>(st.saved.size());
        wire part = std::move(st.saved[index]);
        if (index + 1 == total) st.saved.clear();
        return {std::move(part), total};
      },
      [=](primary_atom, const caf::actor& primary) -> caf::result<bool> {
        if (!sent_by(self, config.controller->address()))
          return make_error(errc::authentication_failed, "only the coordinator assigns primaries");
        self->state.primary = primary.address();
        if (self->state.exporter) self->state.exporter->set_backup(true);
        return true;
      },
      [=](restore_atom, uint32_t index, uint32_t total, const wire& part) -> caf::result<bool> {
        return on_restore(self, config, index, total, part);
      },
      [=](backup_atom, caf::actor target) -> caf::result<bool> {
        if (!sent_by(self, config.controller->address()))
          return make_error(errc::authentication_failed, "only the coordinator sets backups");
        return on_backup(self, config, std::move(target));
      },
      [=](promote_atom) -> caf::result<bool> {
        if (!sent_by(self, config.controller->address()))
          return make_error(errc::authentication_failed, "only the coordinator promotes");
        self->state.former_primary = self->state.primary;
        self->state.primary = caf::actor_addr{};
        if (self->state.exporter) self->state.exporter->set_backup(false);
        config.log.info("bucket {}: promoted to primary", self->state.store->id());
        return true;
      },
      [=](mirror_atom, const wire& w) {
        auto& st = self->state;
        if (!st.primary || !sent_by(self, st.primary)) return refuse("a mirrored pull");
        if (auto request = decode<pull_request>(w);
            request && request->worker < st.store->workers()) {
          st.store->grant_pull(request->worker, request->worker_clock);
          // The primary's evictions, then the same read: the same rows, the same memory for
          // delay compensation.
          if (auto err = st.store->evict_rows(request->evicted))
            config.log.warn("bucket {}: a mirrored eviction: {}", st.store->id(), describe(err));
          if (!request->rows.empty())
            (void)st.store->read_rows(request->rows, request->worker, /*mirrored=*/true);
          if (st.backup) self->send(*st.backup, mirror_atom_v, w);  // down the chain
        }
      },
      [=](tick_atom) {
        if (sent_by(self, self->address()) && self->state.exporter) export_rows(self, config);
      },
  };
}

}  // namespace troupe
