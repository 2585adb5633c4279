#include "actors/dp/trainer/allreduce_group.hpp"

#include <fmt/format.h>
#include <caf/scoped_actor.hpp>

#include <cstring>

#include "actors/dp/collective/actor_collective.hpp"
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

// Values whose bits travel unchanged through all_gather and broadcast (no arithmetic).
void put_bits(uint64_t x, float* out) {
  std::memcpy(out, &x, sizeof x);
}
uint64_t get_bits(const float* in) {
  uint64_t x = 0;
  std::memcpy(&x, in, sizeof x);
  return x;
}

caf::expected<std::shared_ptr<sync_result>> agree(collective& c, const sync_order& order,
                                                  std::chrono::milliseconds timeout) {
  const uint32_t n = c.size();
  std::vector<float> steps(2 * n, 0.0f);
  put_bits(order.steps, &steps[2 * c.rank()]);
  if (auto err = c.all_gather(steps, collective_call{0xfffffff0u, timeout})) return err;
  auto out = std::make_shared<sync_result>();
  for (uint32_t r = 0; r < n; ++r)
    if (get_bits(&steps[2 * r]) > out->steps) out->steps = get_bits(&steps[2 * r]), out->source = r;
  const bool source = out->source == c.rank();
  std::vector<float> size(2, 0.0f);
  if (source) put_bits(order.state.size(), size.data());
  if (auto err = c.broadcast(size, out->source, collective_call{0xfffffff1u, timeout})) return err;
  const uint64_t bytes = get_bits(size.data());
  if (bytes > (uint64_t{1} << 34))
    return make_error(errc::message_too_large, "state to synchronise is over 16 GiB");
  std::vector<float> payload((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
  if (source) std::memcpy(payload.data(), order.state.data(), bytes);
  if (auto err = c.broadcast(payload, out->source, collective_call{0xfffffff2u, timeout}))
    return err;
  if (!source) {
    out->state.resize(bytes);
    std::memcpy(out->state.data(), payload.data(), bytes);
  }
  return out;
}

// One reduce order: its plain values summed in fp32, the rest packed by its codec.
caf::expected<wire_figures> reduce(allreduce_group_state& st, const reduce_order& order) {
  auto& c = *st.backend;
  const bool packed = order.codec != kernels::wire_codec::fp32;
  auto plain =
      order.data.first(packed ? std::min(order.plain, order.data.size()) : order.data.size());
  wire_figures out;
  if (!plain.empty()) {
    if (auto err = c.allreduce(plain, collective_call{order.tag, st.timeout})) return err;
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
        if (st.spoiled) return st.spoiled;
        if (!st.backend) return make_error(errc::collective_failed, "the group is not formed");
        const auto began = std::chrono::steady_clock::now();
        auto summed = reduce(st, *order);
        if (!summed) {
          st.spoiled = summed.error();
          st.backend.reset();  // closes its connections: the other members fail at once too
          return std::move(summed.error());
        }
        reduce_done done;
        done.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        done.bytes = summed->bytes;
        done.bytes_inter_host = summed->bytes_inter_host;
        return done;
      },
      [=](sync_atom,
          std::shared_ptr<const sync_order> order) -> caf::result<std::shared_ptr<sync_result>> {
        auto& st = self->state;
        if (st.spoiled) return st.spoiled;
        if (!st.backend) return make_error(errc::collective_failed, "the group is not formed");
        auto agreed = agree(*st.backend, *order, st.timeout);
        if (!agreed) {
          st.spoiled = agreed.error();
          st.backend.reset();
          return std::move(agreed.error());
        }
        return std::move(*agreed);
      },
  };
}

}  // namespace troupe
