#include "actors/parameter_bucket.hpp"

#include "actors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = bucket_actor::stateful_pointer<bucket_actor_state>;

// The reply to an allowed pull: the bucket's values and the embedding rows asked for.
caf::expected<wire> answer(bucket_store& store, const pull_request& request) {
  pull_reply reply = store.grant_pull(request.worker, request.worker_clock);
  if (!request.rows.empty()) {
    auto rows = store.read_rows(request.rows);
    if (!rows) return std::move(rows.error());
    reply.rows = std::move(*rows);
  }
  return encode(reply);
}

// Answers every held pull that the clocks now allow.
void release_held_pulls(self_ptr self) {
  auto& st = self->state;
  std::erase_if(st.held, [&](held_pull& p) {
    if (!st.store->pull_allowed(p.request.worker, p.request.worker_clock)) return false;
    auto reply = answer(*st.store, p.request);
    if (reply)
      p.promise.deliver(std::move(*reply));
    else
      p.promise.deliver(std::move(reply.error()));
    return true;
  });
}

caf::result<wire> on_pull(self_ptr self, const wire& w) {
  auto request = decode<pull_request>(w);
  if (!request) return std::move(request.error());
  auto& st = self->state;
  auto& store = *st.store;
  if (request->bucket != store.id())
    return make_error(errc::unknown_bucket, "pull for bucket " + std::to_string(request->bucket) +
                                                " reached bucket " + std::to_string(store.id()));
  if (request->worker != observer_worker && request->worker >= store.workers())
    return make_error(errc::malformed_message, "pull from an unknown worker");
  if (store.pull_allowed(request->worker, request->worker_clock)) {
    auto reply = answer(store, *request);
    if (!reply) return std::move(reply.error());
    return std::move(*reply);
  }
  for (const auto& p : st.held)
    if (p.request.worker == request->worker)
      return make_error(errc::malformed_message, "a pull of this worker is already waiting");
  auto promise = self->make_response_promise<wire>();
  st.held.push_back(held_pull{promise, std::move(*request)});
  return promise;
}

caf::result<wire> on_push(self_ptr self, const wire& w, const logger& log) {
  auto& store = *self->state.store;
  auto push = decode<push_request>(w, self->state.limits);
  if (!push) {
    store.count_rejected();
    log.warn("rejected a push: {}", describe(push.error()));
    return std::move(push.error());
  }
  auto ack = store.apply(std::move(*push));
  if (!ack) {
    log.warn("rejected a push: {}", describe(ack.error()));
    return std::move(ack.error());
  }
  release_held_pulls(self);
  return encode(*ack);
}

}  // namespace

bucket_actor::behavior_type parameter_bucket(self_ptr self, bucket_spec spec,
                                             bucket_actor_config config) {
  accept_exits_only_from(self, config.supervisor, config.log);
  self->state.store.emplace(std::move(spec));
  // Messages bigger than any honest push or pull for this bucket are refused before decoding.
  // (With embedding tables a push also carries rows: then the codec's own caps apply.)
  uint64_t values = 0;
  for (const auto& s : self->state.store->slices()) values += s.values.size();
  if (!self->state.store->has_tables()) self->state.limits.max_elements = values;
  return {
      [=](pull_atom, const wire& w) { return on_pull(self, w); },
      [=](push_atom, const wire& w) { return on_push(self, w, config.log); },
      [=](stats_atom) -> wire { return encode(self->state.store->stats()); },
      [=](retire_atom, uint32_t worker) {
        if (!sent_by(self, config.controller))
          return config.log.warn("ignored a retire that is not from the coordinator");
        self->state.store->retire(worker);
        release_held_pulls(self);
      },
      [=](admit_atom, uint32_t worker) -> caf::result<uint64_t> {
        if (!sent_by(self, config.controller))
          return make_error(errc::authentication_failed, "only the coordinator admits workers");
        if (worker > self->state.store->workers() || worker >= (1u << 16))
          return make_error(errc::malformed_message, "workers join one rank after another");
        return self->state.store->admit(worker);
      },
  };
}

}  // namespace troupe
