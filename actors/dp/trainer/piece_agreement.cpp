#include "actors/dp/trainer/piece_agreement.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "actors/bucket/app_rule_step.hpp"
#include "actors/bucket/elementwise_step.hpp"
#include "actors/dp/collective/bits.hpp"
#include "actors/dp/compression/compressed_allreduce.hpp"
#include "troupe/error.hpp"

namespace troupe {

std::vector<uint32_t> held_owners(const piece_cut& cut) {
  std::vector<uint32_t> out;
  const uint32_t copies = 1 + std::min(cut.backups, cut.size ? cut.size - 1 : 0);
  for (uint32_t k = 0; k < copies; ++k) out.push_back((cut.rank + cut.size - k) % cut.size);
  return out;
}

held_pieces piece_ranges(const std::vector<flat_range>& buckets, uint32_t size, uint32_t owner) {
  held_pieces out;
  out.owner = owner;
  for (const auto& b : buckets) {
    const auto p = sharded_piece(b.count, size, owner);
    out.pieces.push_back(shard_piece{b.offset + p.begin, p.count, out.total});
    out.total += p.count;
  }
  return out;
}

held_pieces cut_pieces(const std::vector<flat_range>& buckets, uint32_t size, uint32_t owner,
                       const optimizer_config& optimizer) {
  auto out = piece_ranges(buckets, size, owner);
  const unsigned moments = moments_of(optimizer, std::nullopt);
  out.m.assign(moments >= 1 ? out.total : 0, 0.0f);
  out.v.assign(moments >= 2 ? out.total : 0, 0.0f);
  return out;
}

std::vector<held_pieces> cut_held(const std::vector<flat_range>& buckets, const piece_cut& cut,
                                  const optimizer_config& optimizer) {
  std::vector<held_pieces> out;
  for (uint32_t owner : held_owners(cut))
    out.push_back(cut_pieces(buckets, cut.size, owner, optimizer));
  return out;
}

uint64_t copy_overlaps(uint64_t offset, std::span<const float> from, std::vector<held_pieces>& into,
                       bool second) {
  uint64_t copied = 0;
  for (auto& h : into) {
    auto& to = second ? h.v : h.m;
    if (to.empty()) continue;
    for (const auto& p : h.pieces) {
      const uint64_t begin = std::max(offset, p.offset);
      const uint64_t end = std::min(offset + from.size(), p.offset + p.count);
      if (begin >= end) continue;
      std::copy(from.begin() + (begin - offset), from.begin() + (end - offset),
                to.begin() + p.at + (begin - p.offset));
      copied += end - begin;
    }
  }
  return copied;
}

namespace {

std::span<float> part_of(std::vector<float>& all, const shard_piece& p) {
  return all.empty() ? std::span<float>{} : std::span<float>(all).subspan(p.at, p.count);
}

}  // namespace

std::vector<uint64_t> pending_bases(const piece_exchange& x) {
  std::vector<uint64_t> bases;
  for (uint64_t at = 0; const auto& h : x.held) bases.push_back(at), at += h.total;
  return bases;
}

std::span<float> pending_sum(piece_exchange& x, const std::vector<uint64_t>& bases, size_t h,
                             const shard_piece& p) {
  return std::span<float>(x.pending).subspan(bases[h] + p.at, p.count);
}

caf::error step_held(piece_exchange& x, const sum_source& sum_of) {
  if (!elementwise(x.optimizer))
    return make_error(errc::bad_configuration,
                      "sharded state takes element-wise optimizers only (sgd, momentum, adam, "
                      "adamw)");
  const uint64_t t = x.version + 1;
  for (size_t b = 0; b < x.buckets.size(); ++b) step_held_bucket(x, t, b, sum_of);
  x.version = t;
  return {};
}

void step_held_bucket(piece_exchange& x, uint64_t t, size_t bucket, const sum_source& sum_of) {
  for (auto& h : x.held) {
    const auto& p = h.pieces[bucket];
    step_elementwise(x.optimizer, x.optimizer.lr, t, x.params.subspan(p.offset, p.count),
                     part_of(h.m, p), part_of(h.v, p), sum_of(h, p));
  }
}

namespace {

// The agreement's calls, each with a tag of its own (every member makes the same calls).
struct calls {
  std::chrono::milliseconds timeout;
  uint32_t next = 0x50000000u;
  collective_call call() { return collective_call{next++, timeout}; }
};

// Values moved in one broadcast.
constexpr size_t chunk_values = size_t{16} << 20;

// `data` from `root` to every member, in chunks.
caf::error broadcast_all(collective& c, std::span<float> data, uint32_t root, calls& k) {
  for (size_t first = 0; first < data.size(); first += chunk_values)
    if (auto err = c.broadcast(data.subspan(first, std::min(chunk_values, data.size() - first)),
                               root, k.call()))
      return err;
  return {};
}

// What each member says it holds.
struct offer {
  uint64_t at_step = 0, summed_step = 0, version = 0;
  piece_cut cut;
};
constexpr size_t offer_words = 14;  // 7 numbers of 64 bits

caf::expected<std::vector<offer>> gather_offers(collective& c, const piece_exchange& x, calls& k) {
  const uint32_t n = c.size();
  std::vector<float> all(offer_words * n, 0.0f);
  float* mine = &all[offer_words * c.rank()];
  const uint64_t numbers[] = {x.at_step,  x.summed_step, x.version,    x.cut.generation,
                              x.cut.size, x.cut.rank,    x.cut.backups};
  for (size_t i = 0; i < 7; ++i) put_bits(numbers[i], mine + 2 * i);
  if (auto err = c.all_gather(all, k.call())) return err;
  std::vector<offer> out(n);
  for (uint32_t r = 0; r < n; ++r) {
    const float* w = &all[offer_words * r];
    out[r].at_step = get_bits(w);
    out[r].summed_step = get_bits(w + 2);
    out[r].version = get_bits(w + 4);
    out[r].cut =
        piece_cut{get_bits(w + 6), static_cast<uint32_t>(get_bits(w + 8)),
                  static_cast<uint32_t>(get_bits(w + 10)), static_cast<uint32_t>(get_bits(w + 12))};
  }
  return out;
}

// Generation 1 (no member holds a cut): member 0's parameters to every member, and moments
// that start at zero.
caf::expected<std::shared_ptr<sync_result>> start_fresh(collective& c, piece_exchange& x,
                                                        const std::vector<offer>& offers,
                                                        calls& k) {
  for (const auto& o : offers)
    if (o.at_step > 0)
      return make_error(errc::job_failed,
                        "the sharded optimizer state is lost: no member holds pieces of it");
  if (auto err = broadcast_all(c, x.params, 0, k)) return err;
  x.held = cut_held(x.buckets, x.next, x.optimizer);
  x.cut = x.next;
  x.at_step = x.version = x.summed_step = 0;
  x.pending.clear();
  auto out = std::make_shared<sync_result>();
  out->taken = c.rank() != 0;
  return out;
}

// The members at step `s` - 1 that hold step s's sums take it as a member that took it did:
// applied or skipped, and the model's buffers after it.
caf::error roll_forward(collective& c, piece_exchange& x, uint32_t source, bool rolls, uint64_t s,
                        calls& k) {
  std::vector<float> head(4, 0.0f);
  if (c.rank() == source)
    put_bits(x.last_applied, &head[0]), put_bits(x.last_buffers.size(), &head[2]);
  if (auto err = c.broadcast(head, source, k.call())) return err;
  const bool applied = get_bits(&head[0]) != 0;
  const uint64_t buffers = get_bits(&head[2]);
  uint64_t expected = 0;
  for (const auto& b : x.model_buffers) expected += b.count;
  if (buffers != expected && buffers != 0)
    return make_error(errc::shape_mismatch, "the roll forward's buffers are of another model");
  std::vector<float> values = c.rank() == source ? x.last_buffers : std::vector<float>(buffers);
  if (buffers > 0)
    if (auto err = c.broadcast(values, source, k.call())) return err;
  if (!rolls) return {};
  if (applied) {
    const auto bases = pending_bases(x);
    if (auto err = step_held(x, [&](const held_pieces& h, const shard_piece& p) {
          return pending_sum(x, bases, static_cast<size_t>(&h - x.held.data()), p);
        }))
      return err;
    size_t at = 0;
    for (const auto& b : x.model_buffers) {
      if (buffers > 0) std::copy_n(values.begin() + at, b.count, x.params.begin() + b.offset);
      at += b.count;
    }
  }
  x.at_step = s;
  x.last_applied = applied;
  x.last_buffers = std::move(values);
  x.summed_step = 0;
  x.pending.clear();
  return {};
}

}  // namespace

caf::expected<std::shared_ptr<sync_result>> agree_on_pieces(collective& c, piece_exchange& x,
                                                            std::chrono::milliseconds timeout) {
  calls k{timeout};
  auto offered = gather_offers(c, x, k);
  if (!offered) return std::move(offered.error());
  const auto& offers = *offered;
  const uint32_t n = c.size();
  uint64_t newest = 0;
  for (const auto& o : offers) newest = std::max(newest, o.cut.generation);
  if (newest == 0) return start_fresh(c, x, offers, k);
  // The holders of the newest cut, the step they reached, and who is one step behind it.
  auto holds = [&](uint32_t r) { return offers[r].cut.generation == newest; };
  uint64_t s = 0;
  uint32_t source = n;
  for (uint32_t r = 0; r < n; ++r)
    if (holds(r) && (source == n || offers[r].at_step > s)) s = offers[r].at_step, source = r;
  if (s == 0) return start_fresh(c, x, offers, k);  // no step taken: nothing to keep but values
  auto rolls = [&](uint32_t r) {
    return holds(r) && offers[r].at_step + 1 == s && offers[r].summed_step == s;
  };
  auto ready = [&](uint32_t r) { return holds(r) && (offers[r].at_step == s || rolls(r)); };
  bool any_rolls = false;
  for (uint32_t r = 0; r < n; ++r) any_rolls = any_rolls || rolls(r);
  if (any_rolls)
    if (auto err = roll_forward(c, x, source, rolls(c.rank()), s, k)) return err;
  // Who sends each old owner's pieces: its lowest ready holder.
  const piece_cut old = offers[source].cut;
  std::vector<uint32_t> sender(old.size, n);
  for (uint32_t r = 0; r < n; ++r) {
    if (!ready(r)) continue;
    for (uint32_t owner : held_owners(offers[r].cut))
      if (owner < old.size && sender[owner] == n) sender[owner] = r;
  }
  for (uint32_t owner = 0; owner < old.size; ++owner)
    if (sender[owner] == n)
      return make_error(
          errc::job_failed,
          fmt::format("the pieces of member {} of generation {} of the sharded optimizer state "
                      "are lost: every member that held them is gone (--shard-backups {} "
                      "covers that many members lost at once)",
                      owner, newest, old.backups));
  // The new cut's pieces, filled from every old owner's, bucket by bucket.
  auto fresh = cut_held(x.buckets, x.next, x.optimizer);
  std::vector<float> scratch;
  const unsigned moments = moments_of(x.optimizer, std::nullopt);
  for (uint32_t owner = 0; owner < old.size; ++owner) {
    const uint32_t root = sender[owner];
    held_pieces* mine = nullptr;  // the root's own copy
    if (c.rank() == root)
      for (auto& h : x.held)
        if (h.owner == owner) mine = &h;
    if (c.rank() == root && !mine)
      return make_error(errc::job_failed, "a member lost track of the pieces it holds");
    const auto pieces = piece_ranges(x.buckets, old.size, owner);
    for (const auto& p : pieces.pieces) {
      if (auto err = broadcast_all(c, x.params.subspan(p.offset, p.count), root, k)) return err;
      for (unsigned which = 0; which < moments; ++which) {
        std::span<float> values;
        if (mine) {
          values = std::span<float>(which == 0 ? mine->m : mine->v).subspan(p.at, p.count);
        } else {
          scratch.resize(p.count);
          values = scratch;
        }
        if (auto err = broadcast_all(c, values, root, k)) return err;
        copy_overlaps(p.offset, values, fresh, which == 1);
      }
    }
  }
  x.held = std::move(fresh);
  x.cut = x.next;
  x.at_step = s;
  x.version = offers[source].version;
  x.summed_step = 0;
  x.pending.clear();
  auto out = std::make_shared<sync_result>();
  out->steps = s;
  out->source = source;
  out->taken = true;
  return out;
}

}  // namespace troupe
