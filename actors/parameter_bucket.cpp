#include "actors/parameter_bucket.hpp"

#include "actors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe {

bucket_actor::behavior_type parameter_bucket(
    bucket_actor::stateful_pointer<bucket_actor_state> self, bucket_spec spec,
    caf::actor_addr supervisor, logger log) {
  accept_exits_only_from(self, supervisor, log);
  self->state.store.emplace(std::move(spec));
  // Messages bigger than any honest push or pull for this bucket are refused before decoding.
  uint64_t values = 0;
  for (const auto& s : self->state.store->slices()) values += s.values.size();
  self->state.limits.max_elements = values;
  return {
      [=](pull_atom, const wire& w) -> caf::result<wire> {
        auto request = decode<pull_request>(w);
        if (!request) return std::move(request.error());
        auto& store = *self->state.store;
        if (request->bucket != store.id())
          return make_error(errc::unknown_bucket,
                            "pull for bucket " + std::to_string(request->bucket) +
                                " reached bucket " + std::to_string(store.id()));
        return encode(store.snapshot());
      },
      [=](push_atom, const wire& w) -> caf::result<wire> {
        auto& store = *self->state.store;
        auto push = decode<push_request>(w, self->state.limits);
        if (!push) {
          store.count_rejected();
          log.warn("rejected a push: {}", describe(push.error()));
          return std::move(push.error());
        }
        auto ack = store.apply(*push);
        if (!ack) {
          log.warn("rejected a push: {}", describe(ack.error()));
          return std::move(ack.error());
        }
        return encode(*ack);
      },
      [=](stats_atom) -> wire { return encode(self->state.store->stats()); },
  };
}

}  // namespace troupe
