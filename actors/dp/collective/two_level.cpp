#include "actors/dp/collective/two_level.hpp"

#include <algorithm>
#include <map>

namespace troupe {

host_layout layout_of(const std::vector<std::string>& hosts, uint32_t rank) {
  host_layout out;
  std::vector<std::string> order;
  std::map<std::string, uint32_t> counts;
  for (const auto& h : hosts) {
    if (!counts.count(h)) order.push_back(h);
    ++counts[h];
  }
  if (rank >= hosts.size()) return out;
  out.hosts = static_cast<uint32_t>(order.size());
  out.host =
      static_cast<uint32_t>(std::find(order.begin(), order.end(), hosts[rank]) - order.begin());
  out.local_size = counts[hosts[rank]];
  for (uint32_t r = 0; r < rank; ++r) out.local_rank += hosts[r] == hosts[rank] ? 1 : 0;
  out.uniform = std::all_of(counts.begin(), counts.end(),
                            [&](const auto& c) { return c.second == out.local_size; });
  return out;
}

bool two_level_fits(const std::vector<std::string>& hosts) {
  if (hosts.empty()) return false;
  const auto l = layout_of(hosts, 0);
  return l.hosts > 1 && l.local_size > 1 && l.uniform;
}

two_level_collective::two_level_collective(std::unique_ptr<collective> flat,
                                           std::unique_ptr<collective> local,
                                           std::unique_ptr<collective> cross)
    : flat_(std::move(flat)), local_(std::move(local)), cross_(std::move(cross)) {}

std::string two_level_collective::backend() const {
  const std::string inside = local_->backend();
  return flat_->backend() + " two-level" +
         (inside == flat_->backend() ? "" : " (" + inside + " inside hosts)");
}

caf::error two_level_collective::allreduce(std::span<float> data, const collective_call& call) {
  if (data.empty()) return {};
  const size_t l = local_->size();
  const size_t padded = (data.size() + l - 1) / l * l;
  padded_.assign(padded, 0.0f);
  std::copy(data.begin(), data.end(), padded_.begin());
  std::span<float> all(padded_);
  if (auto err = local_->reduce_scatter(all, call)) return err;
  const auto mine = shard_of(padded, local_->size(), local_->rank());
  if (auto err = cross_->allreduce(all.subspan(mine.begin, mine.count), call)) return err;
  if (auto err = local_->all_gather(all, call)) return err;
  std::copy(padded_.begin(), padded_.begin() + data.size(), data.begin());
  return {};
}

uint64_t two_level_collective::allreduce_bytes_inter_host(uint64_t bytes,
                                                          const std::vector<std::string>&) const {
  return cross_->allreduce_bytes(bytes / local_->size());
}

uint64_t two_level_collective::allreduce_bytes(uint64_t bytes) const {
  return local_->allreduce_bytes(bytes) + allreduce_bytes_inter_host(bytes, {});
}

}  // namespace troupe
