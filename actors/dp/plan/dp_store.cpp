// The dp coordinator's rendezvous store: keys of the current generation, set and read only by
// its members (rank and token), gets held until the key is set (bounded).
#include "actors/dp/plan/dp_plan_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

// The entry's member, when its rank, token and generation are this group's.
const dp_member* store_client(const coordinator_state& st, const store_entry& e) {
  if (!st.shell.started.has_value() || e.generation != st.dp->generation) return nullptr;
  for (const auto& m : st.dp->members)
    if (!m.lost && m.rank == e.rank && m.token == e.token) return &m;
  return nullptr;
}

caf::result<bool> store_put(self_ptr self, const wire& w) {
  auto& st = self->state;
  auto entry = decode<store_entry>(w);
  if (!entry) return std::move(entry.error());
  if (!store_client(st, *entry))
    return make_error(errc::authentication_failed, "store: not a member of this generation");
  if (auto err = st.dp->store.put(*entry)) return err;
  return true;
}

caf::result<wire> store_get(self_ptr self, const wire& w) {
  auto& st = self->state;
  auto entry = decode<store_entry>(w);
  if (!entry) return std::move(entry.error());
  if (!store_client(st, *entry))
    return make_error(errc::authentication_failed, "store: not a member of this generation");
  return st.dp->store.get(self, std::move(*entry));
}

}  // namespace troupe::dp_plan
