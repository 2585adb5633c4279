// The dp coordinator's rendezvous store: keys of the current generation, set and read only by
// its members (rank and token), gets held until the key is set (bounded).
#include "actors/dp/collective/rendezvous_store.hpp"
#include "actors/dp/dp_coordinator_parts.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_coordination {

// The entry's member, when its rank, token and generation are this group's.
const dp_member* store_client(const dp_coordinator_state& st, const store_entry& e) {
  if (!st.training || e.generation != st.generation) return nullptr;
  for (const auto& m : st.members)
    if (!m.lost && m.rank == e.rank && m.token == e.token) return &m;
  return nullptr;
}

caf::result<bool> store_put(self_ptr self, const wire& w) {
  auto& st = self->state;
  auto entry = decode<store_entry>(w);
  if (!entry) return std::move(entry.error());
  if (!store_client(st, *entry))
    return make_error(errc::authentication_failed, "store: not a member of this generation");
  std::map<std::string, std::vector<char>> view;  // check_store_set's form of one entry
  if (auto it = st.store.find(entry->key); it != st.store.end())
    view.emplace(it->first, std::vector<char>(it->second.begin(), it->second.end()));
  if (st.store.size() >= max_store_keys) return make_error(errc::message_too_large, "store full");
  if (auto err = check_store_set(view, entry->key,
                                 std::vector<char>(entry->value.begin(), entry->value.end())))
    return err;
  st.store[entry->key] = entry->value;
  if (auto it = st.store_waiters.find(entry->key); it != st.store_waiters.end()) {
    const wire reply = encode(*entry);
    for (auto& promise : it->second) promise.deliver(reply);
    st.waiting -= it->second.size();
    st.store_waiters.erase(it);
  }
  return true;
}

caf::result<wire> store_get(self_ptr self, const wire& w) {
  auto& st = self->state;
  auto entry = decode<store_entry>(w);
  if (!entry) return std::move(entry.error());
  if (!store_client(st, *entry))
    return make_error(errc::authentication_failed, "store: not a member of this generation");
  if (auto it = st.store.find(entry->key); it != st.store.end()) {
    entry->value = it->second;
    return encode(*entry);
  }
  if (st.waiting >= max_store_waiters)
    return make_error(errc::message_too_large, "store: too many requests waiting");
  ++st.waiting;
  auto& waiters = st.store_waiters[entry->key];
  waiters.push_back(self->make_response_promise<wire>());
  return waiters.back();
}

}  // namespace troupe::dp_coordination
