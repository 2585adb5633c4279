#include "actors/dp/loops/loop_group.hpp"
#include "actors/dp/plan/generation_ranks.hpp"

#include "actors/supervision/supervisors/guards.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using self_ptr = loop_group_actor::stateful_pointer<loop_group_state>;

size_t live_count(const loop_group_state& st) {
  size_t n = 0;
  for (const auto& m : st.members) n += m.live ? 1 : 0;
  return n;
}

// A new generation of the live members: ranks in join order, a token each, a fresh store.
void form_generation(self_ptr self, const loop_group_config& config, const std::string& why) {
  auto& st = self->state;
  const auto size = static_cast<uint32_t>(live_count(st));
  if (size == 0) return config.log.info("no member left ({}); waiting for joins", why);
  ++st.generation;
  st.store.reset();
  config.log.info("generation {} ({}): {} members", st.generation, why, size);
  const auto live = [](const loop_group_member& m) { return m.live; };
  for (auto& [m, start] : rank_generation(st.members, live, st.generation)) {
    start.collective = config.collective;
    start.timeout_ms = static_cast<uint64_t>(config.timeout.count());
    // The loops own their epochs and batches; these only pass a dp start's codec checks.
    start.epochs = 1;
    start.global_batch = size;
    start.bucket_bytes = uint64_t{1} << 20;
    self->send(m->handle, start_atom_v, encode(start));
  }
}

// The live member that sent the current message, if any.
loop_group_member* sender(self_ptr self) {
  for (auto& m : self->state.members)
    if (m.live && sent_by(self, m.handle.address())) return &m;
  return nullptr;
}

// The live member an entry's rank and token name in the current generation.
bool is_member(const loop_group_state& st, const store_entry& e) {
  if (e.generation != st.generation) return false;
  for (const auto& m : st.members)
    if (m.live && m.rank == e.rank && m.token == e.token) return true;
  return false;
}

caf::result<wire> join(self_ptr self, const loop_group_config& config, const wire& w,
                       const loop_member_actor& handle) {
  auto& st = self->state;
  auto request = decode<join_request>(w);
  if (!request) return std::move(request.error());
  if (!handle) return make_error(errc::malformed_message, "a join without a member");
  for (const auto& m : st.members)
    if (m.live && m.handle == handle)
      return make_error(errc::bad_configuration, "this member has joined already");
  self->monitor(handle);
  st.members.push_back(loop_group_member{request->name, handle, request->host_label});
  config.log.info("{} joined ({} members)", request->name, live_count(st));
  join_reply reply;
  reply.rank = static_cast<uint32_t>(st.members.size() - 1);
  reply.world_workers = static_cast<uint32_t>(live_count(st));
  if (st.generation > 0 || live_count(st) >= config.min_members)
    form_generation(self, config, request->name + " joined");
  return encode(reply);
}

}  // namespace

loop_group_actor::behavior_type loop_group(self_ptr self, loop_group_config config) {
  self->set_down_handler([=](caf::down_msg& msg) {
    for (auto& m : self->state.members) {
      if (!m.live || m.handle.address() != msg.source) continue;
      m.live = false;
      if (self->state.generation > 0) form_generation(self, config, m.name + " was lost");
    }
  });
  return {
      [=](join_atom, const wire& w, const loop_member_actor& handle) {
        return join(self, config, w, handle);
      },
      [=](put_atom, const wire& w) -> caf::result<bool> {
        auto entry = decode<store_entry>(w);
        if (!entry) return std::move(entry.error());
        if (!is_member(self->state, *entry))
          return make_error(errc::authentication_failed, "store: not a member of this generation");
        if (auto err = self->state.store.put(*entry)) return err;
        return true;
      },
      [=](get_atom, const wire& w) -> caf::result<wire> {
        auto entry = decode<store_entry>(w);
        if (!entry) return std::move(entry.error());
        if (!is_member(self->state, *entry))
          return make_error(errc::authentication_failed, "store: not a member of this generation");
        return self->state.store.get(self, std::move(*entry));
      },
      [=](broken_atom, uint64_t generation, const std::string& why) {
        auto* m = sender(self);
        if (!m || generation != self->state.generation) return;
        config.log.warn("generation {}: {}'s collective failed: {}", generation, m->name, why);
        self->delayed_send(self, config.settle, tick_atom_v, generation);
      },
      [=](tick_atom, uint64_t generation) {
        // No loss re-formed the group meanwhile: form it again with whoever is live.
        if (generation == self->state.generation)
          form_generation(self, config, "a collective failed");
      },
      [=](done_atom, uint64_t token) {
        auto* m = sender(self);
        if (!m || m->token != token) return;
        m->live = false;
        self->demonitor(m->handle.address());
        config.log.info("{} left", m->name);
        if (self->state.generation > 0) form_generation(self, config, m->name + " left");
      },
  };
}

caf::actor spawn_loop_group(caf::actor_system& sys, const loop_group_config& config) {
  return caf::actor_cast<caf::actor>(sys.spawn(loop_group, config));
}

}  // namespace troupe
