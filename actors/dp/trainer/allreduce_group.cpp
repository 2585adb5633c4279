#include "actors/dp/trainer/allreduce_group.hpp"

#include <fmt/format.h>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <cstring>

#include "actors/dp/collective/actor_collective.hpp"
#include "actors/dp/collective/bits.hpp"
#include "actors/dp/collective/gloo_collective.hpp"
#include "actors/dp/collective/nccl_collective.hpp"
#include "actors/dp/collective/two_level.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

// The coordinator's rendezvous store, asked through actor messages from the group's own
// thread (which may block: it is detached). Every request carries the member's token.
class coordinator_store : public rendezvous_store {
 public:
  coordinator_store(caf::actor_system& sys, const group_form& form) : sys_(sys), form_(form) {}

  caf::error set(const std::string& key, std::vector<char> value) override {
    store_entry entry{form_.generation, form_.rank, form_.token, key,
                      std::vector<uint8_t>(value.begin(), value.end())};
    caf::error result = make_error(errc::timeout, "store: no answer to set '" + key + "'");
    caf::scoped_actor self{sys_};
    self->request(form_.coordinator, form_.timeout, put_atom_v, encode(entry))
        .receive([&](bool) { result = caf::error{}; }, [&](caf::error& err) { result = err; });
    return result;
  }

  caf::expected<std::vector<char>> get(const std::string& key,
                                       std::chrono::milliseconds timeout) override {
    store_entry entry{form_.generation, form_.rank, form_.token, key, {}};
    caf::expected<std::vector<char>> result =
        make_error(errc::timeout, "store: nobody set '" + key + "'");
    caf::scoped_actor self{sys_};
    self->request(form_.coordinator, timeout, get_atom_v, encode(entry))
        .receive(
            [&](const wire& w) {
              auto got = decode<store_entry>(w);
              if (!got)
                result = std::move(got.error());
              else
                result = std::vector<char>(got->value.begin(), got->value.end());
            },
            [&](caf::error& err) { result = std::move(err); });
    return result;
  }

 private:
  caf::actor_system& sys_;
  group_form form_;
};

// The backend of the level inside a host in two-level reduction: NCCL where this host has a
// GPU for each of its members, otherwise the group's own.
collective_kind inside_host_backend(const group_form& form, uint32_t local_size) {
  auto gpus = nccl_devices();
  return gpus && static_cast<uint32_t>(*gpus) >= local_size ? collective_kind::nccl
                                                            : form.collective;
}

caf::expected<std::unique_ptr<collective>> connect(caf::actor_system& sys, const group_form& form) {
  std::unique_ptr<rendezvous_store> own;
  rendezvous_store* store = form.store.get();
  if (!store) store = (own = std::make_unique<coordinator_store>(sys, form)).get();
  const std::string prefix = fmt::format("g{}/", form.generation);
  // The members of our host, then those with our local rank on every host; the local rank
  // picks this member's GPU for NCCL.
  const auto where = layout_of(form.hosts, form.rank);
  const int local_rank = static_cast<int>(where.local_size ? where.local_rank : form.rank);
  // One group of the generation over `backend`.
  auto make = [&](collective_kind backend, uint32_t rank, uint32_t size,
                  const std::string& keys) -> caf::expected<std::unique_ptr<collective>> {
    if (backend == collective_kind::actors)
      return make_actor_collective(sys, *store,
                                   actor_collective_options{rank, size, form.generation, form.key,
                                                            form.bind_host, keys, form.timeout});
    if (backend == collective_kind::nccl)
      return make_nccl_collective(sys, *store,
                                  nccl_options{rank, size, local_rank, keys, form.timeout});
    return make_gloo_collective(*store,
                                gloo_options{rank, size, form.bind_host, keys, form.timeout});
  };
  auto flat = make(form.collective, form.rank, form.size, prefix);
  if (!flat || !form.two_level) return flat;
  if (!where.uniform || where.hosts < 2)
    return make_error(errc::bad_configuration,
                      "two-level reduction needs as many members on every host");
  auto local = make(inside_host_backend(form, where.local_size), where.local_rank, where.local_size,
                    fmt::format("{}host{}/", prefix, where.host));
  if (!local) return std::move(local.error());
  auto cross = make(form.collective, where.host, where.hosts,
                    fmt::format("{}local{}/", prefix, where.local_rank));
  if (!cross) return std::move(cross.error());
  return std::unique_ptr<collective>(
      new two_level_collective(std::move(*flat), std::move(*local), std::move(*cross)));
}

// The agreement's calls, each with a tag of its own (every member makes the same calls).
struct agreement_calls {
  std::chrono::milliseconds timeout;
  uint32_t next = 0x40000000u;
  collective_call call() { return collective_call{next++, timeout}; }
};

// The largest message of a state that a member takes: the codec's cap on one message.
constexpr uint64_t max_state_message = codec_limits{}.max_bytes + 4096;
// Values of an array moved in one broadcast.
constexpr size_t array_chunk = size_t{16} << 20;

// One message from the source to every member (`into` on those that take it; none: dropped).
caf::error move_message(collective& c, uint32_t source, agreement_calls& calls,
                        std::span<const char> message, bool more, state_pieces* into,
                        caf::error& refused, bool& more_out) {
  std::vector<float> header(4, 0.0f);
  if (c.rank() == source) put_bits(message.size(), &header[0]), put_bits(more, &header[2]);
  if (auto err = c.broadcast(header, source, calls.call())) return err;
  const uint64_t bytes = get_bits(&header[0]);
  more_out = get_bits(&header[2]) != 0;
  if (bytes == 0) return {};
  if (bytes > max_state_message)  // no member allocates what a peer merely announced
    return make_error(errc::message_too_large,
                      fmt::format("a state message of {} bytes in the agreement", bytes));
  std::vector<float> payload((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
  if (c.rank() == source) std::memcpy(payload.data(), message.data(), bytes);
  if (auto err = c.broadcast(payload, source, calls.call())) return err;
  if (into && !refused)
    refused = into->take({reinterpret_cast<const char*>(payload.data()), size_t(bytes)});
  return {};
}

// Every member learns each one's steps and whether its state is spoiled.
struct offers {
  std::vector<uint64_t> steps;
  std::vector<bool> spoiled;
};
caf::expected<offers> gather_offers(collective& c, const sync_order& order,
                                    agreement_calls& calls) {
  const uint32_t n = c.size();
  std::vector<float> all(4 * n, 0.0f);
  put_bits(order.steps, &all[4 * c.rank()]);
  put_bits(order.state->spoiled() ? 1 : 0, &all[4 * c.rank() + 2]);
  if (auto err = c.all_gather(all, calls.call())) return err;
  offers out;
  for (uint32_t r = 0; r < n; ++r) {
    out.steps.push_back(get_bits(&all[4 * r]));
    out.spoiled.push_back(get_bits(&all[4 * r + 2]) != 0);
  }
  return out;
}

// Whether every member can go on (each says so after it saw the arrays' sizes).
caf::expected<bool> all_ready(collective& c, bool ready, agreement_calls& calls) {
  std::vector<float> all(c.size(), 0.0f);
  all[c.rank()] = ready ? 1.0f : 0.0f;
  if (auto err = c.all_gather(all, calls.call())) return err;
  return std::all_of(all.begin(), all.end(), [](float x) { return x == 1.0f; });
}

// The source's messages, then its arrays' sizes; a member that takes the state takes them.
caf::error move_messages(collective& c, uint32_t source, const sync_order& order, bool takes,
                         agreement_calls& calls, caf::error& refused) {
  state_pieces* into = takes ? order.state.get() : nullptr;
  bool more = true;
  if (c.rank() == source) {
    if (auto err = order.state->each_message([&](std::span<const char> m) {
          return move_message(c, source, calls, m, true, into, refused, more);
        }))
      return err;
    return move_message(c, source, calls, {}, false, into, refused, more);
  }
  while (more)
    if (auto err = move_message(c, source, calls, {}, false, into, refused, more)) return err;
  return {};
}

// The source's arrays, chunk by chunk, straight from its state into the takers' (the others
// receive into a scratch chunk).
caf::error move_arrays(collective& c, uint32_t source, const sync_order& order, bool takes,
                       agreement_calls& calls, caf::error& refused) {
  std::vector<float> count(2, 0.0f);
  const auto mine =
      c.rank() == source ? order.state->arrays() : std::vector<std::span<const float>>{};
  put_bits(mine.size(), count.data());
  if (auto err = c.broadcast(count, source, calls.call())) return err;
  const uint64_t arrays = get_bits(count.data());
  if (arrays > (uint64_t{1} << 20))
    return make_error(errc::message_too_large, "over a million arrays in the agreement");
  std::vector<float> sized(2 * arrays, 0.0f);
  for (size_t i = 0; i < mine.size(); ++i) put_bits(mine[i].size(), &sized[2 * i]);
  if (auto err = c.broadcast(sized, source, calls.call())) return err;
  std::vector<uint64_t> sizes(arrays);
  for (size_t i = 0; i < arrays; ++i) sizes[i] = get_bits(&sized[2 * i]);
  std::vector<std::span<float>> targets;
  if (takes && !refused) {
    auto found = order.state->targets(sizes);
    if (found)
      targets = std::move(*found);
    else
      refused = std::move(found.error());
  }
  auto ready = all_ready(c, !refused, calls);
  if (!ready) return std::move(ready.error());
  if (!*ready)
    return refused ? refused
                   : make_error(errc::shape_mismatch, "a member cannot take the agreed state");
  std::vector<float> scratch;
  for (size_t i = 0; i < arrays; ++i)
    for (uint64_t first = 0; first < sizes[i]; first += array_chunk) {
      const size_t count = std::min<uint64_t>(array_chunk, sizes[i] - first);
      std::span<float> chunk;
      if (c.rank() == source)  // (the root's buffer is only read)
        chunk = {const_cast<float*>(mine[i].data()) + first, count};
      else if (takes)
        chunk = targets[i].subspan(first, count);
      else
        scratch.resize(count), chunk = scratch;
      if (auto err = c.broadcast(chunk, source, calls.call())) return err;
    }
  return {};
}

}  // namespace

caf::expected<std::shared_ptr<sync_result>> agree_on_state(collective& c, const sync_order& order,
                                                           std::chrono::milliseconds timeout) {
  agreement_calls calls{timeout};
  auto offered = gather_offers(c, order, calls);
  if (!offered) return std::move(offered.error());
  auto out = std::make_shared<sync_result>();
  bool found = false;
  for (uint32_t r = 0; r < c.size(); ++r)
    if (!offered->spoiled[r] && (!found || offered->steps[r] > out->steps))
      out->steps = offered->steps[r], out->source = r, found = true;
  if (!found)
    return make_error(errc::job_failed,
                      "the model's state is lost: every member that held it left during a "
                      "hand-over");
  // Who takes the state: whoever is behind the source or spoiled; at step 0 everyone.
  auto behind = [&](uint32_t r) {
    return r != out->source &&
           (offered->spoiled[r] || offered->steps[r] < out->steps || out->steps == 0);
  };
  bool anyone = false;
  for (uint32_t r = 0; r < c.size(); ++r) anyone = anyone || behind(r);
  if (!anyone) return out;
  const bool takes = behind(c.rank());
  caf::error refused;
  if (auto err = move_messages(c, out->source, order, takes, calls, refused)) return err;
  if (auto err = move_arrays(c, out->source, order, takes, calls, refused)) return err;
  if (takes)
    if (auto err = order.state->finish()) return err;
  out->taken = takes;
  return out;
}

caf::error byte_pieces::each_message(
    const std::function<caf::error(std::span<const char>)>& put) const {
  for (size_t first = 0; first < bytes_.size(); first += max_piece_bytes)
    if (auto err = put(std::span<const char>(bytes_).subspan(
            first, std::min(max_piece_bytes, bytes_.size() - first))))
      return err;
  return {};
}

caf::error byte_pieces::take(std::span<const char> message) {
  if (!taking_) bytes_.clear(), taking_ = true;  // our own bytes give way to the source's
  bytes_.insert(bytes_.end(), message.begin(), message.end());
  return {};
}

caf::expected<std::vector<std::span<float>>> byte_pieces::targets(
    const std::vector<uint64_t>& sizes) {
  if (!sizes.empty()) return make_error(errc::shape_mismatch, "a state in bytes has no arrays");
  if (!taking_) bytes_.clear(), taking_ = true;  // (an empty state: no message came)
  return std::vector<std::span<float>>{};
}

namespace {

// One reduce order: its plain values summed in fp32, the rest packed by its codec.
caf::expected<wire_figures> reduce(allreduce_group_state& st, const reduce_order& order) {
  auto& c = *st.backend;
  const collective_call call{order.tag, st.timeout};
  if (order.op == reduce_op::reduce_scatter)
    return sharded_reduce(c, order.data, order.codec, order.copies, call, st.hosts, st.scratch);
  if (order.op == reduce_op::all_gather) return sharded_gather(c, order.data, call, st.hosts);
  const bool packed = order.codec != kernels::wire_codec::fp32;
  auto plain =
      order.data.first(packed ? std::min(order.plain, order.data.size()) : order.data.size());
  wire_figures out;
  if (!plain.empty()) {
    if (auto err = c.allreduce(plain, call)) return err;
    out.bytes = c.allreduce_bytes(plain.size_bytes());
    out.bytes_inter_host = c.allreduce_bytes_inter_host(plain.size_bytes(), st.hosts);
  }
  auto rest = order.data.subspan(plain.size());
  if (rest.empty()) return out;
  auto sum = compressed_allreduce(c, rest, order.codec, order.errors,
                                  collective_call{order.tag ^ 0x80000000u, st.timeout}, st.hosts,
                                  st.scratch);
  if (!sum) return sum;
  out.bytes += sum->bytes;
  out.bytes_inter_host += sum->bytes_inter_host;
  return out;
}

// Runs `work` (a reduce or an agreement) on the formed group's backend; a failure closes the
// backend (its connections: the other members fail at once too), and the group refuses every
// later order of this generation with that error.
template <class Work>
auto on_backend(allreduce_group_state& st, Work work) -> decltype(work(*st.backend, st.timeout)) {
  if (st.spoiled) return st.spoiled;
  if (!st.backend) return make_error(errc::collective_failed, "the group is not formed");
  auto done = work(*st.backend, st.timeout);
  if (!done) {
    st.spoiled = done.error();
    st.backend.reset();
  }
  return done;
}

}  // namespace

allreduce_group_actor::behavior_type allreduce_group(
    allreduce_group_actor::stateful_pointer<allreduce_group_state> self, logger log) {
  return {
      [=](form_atom, std::shared_ptr<const group_form> form) -> caf::result<bool> {
        auto& st = self->state;
        st.backend.reset();
        st.spoiled = caf::error{};
        st.timeout = form->timeout;
        auto made = connect(self->system(), *form);
        if (!made) {
          log.warn("cannot form generation {}: {}", form->generation, describe(made.error()));
          return std::move(made.error());
        }
        st.backend = std::move(*made);
        st.hosts = form->hosts;
        log.debug("generation {}: rank {} of {} over {}", form->generation, form->rank, form->size,
                  st.backend->backend());
        return true;
      },
      [=](reduce_atom, std::shared_ptr<const reduce_order> order) -> caf::result<reduce_done> {
        auto& st = self->state;
        const auto began = std::chrono::steady_clock::now();
        auto summed = on_backend(
            st, [&](collective&, std::chrono::milliseconds) { return reduce(st, *order); });
        if (!summed) return std::move(summed.error());
        if (order->summed) order->summed();
        reduce_done done;
        done.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        done.bytes = summed->bytes;
        done.bytes_inter_host = summed->bytes_inter_host;
        return done;
      },
      [=](sync_atom,
          std::shared_ptr<const sync_order> order) -> caf::result<std::shared_ptr<sync_result>> {
        auto agreed = on_backend(self->state, [&](collective& c, std::chrono::milliseconds t) {
          return agree_on_state(c, *order, t);
        });
        if (!agreed) return std::move(agreed.error());
        return std::move(*agreed);
      },
      [=](sync_atom,
          std::shared_ptr<piece_exchange> pieces) -> caf::result<std::shared_ptr<sync_result>> {
        auto agreed = on_backend(self->state, [&](collective& c, std::chrono::milliseconds t) {
          return agree_on_pieces(c, *pieces, t);
        });
        if (!agreed) return std::move(agreed.error());
        return std::move(*agreed);
      },
  };
}

}  // namespace troupe
