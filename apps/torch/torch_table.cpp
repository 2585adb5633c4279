#include <cmath>
#include <stdexcept>

#include "troupe/torch.hpp"

namespace troupe {

torch_table_impl::torch_table_impl(std::string name, int64_t dim, double init_scale,
                                   int64_t capacity, std::string evict, int64_t admit_after) {
  if (name.empty()) throw std::invalid_argument("troupe::torch_table: the name is empty");
  if (dim < 1 || dim > (int64_t{1} << 31))
    throw std::invalid_argument("troupe::torch_table '" + name + "': dim must be at least 1");
  if (!(init_scale >= 0) || !std::isfinite(init_scale))
    throw std::invalid_argument("troupe::torch_table '" + name +
                                "': init_scale must be finite and >= 0");
  if (capacity < 1)
    throw std::invalid_argument("troupe::torch_table '" + name + "': capacity must be >= 1");
  if (!parse_eviction(evict))
    throw std::invalid_argument("troupe::torch_table '" + name +
                                "': evict must be none, lru, lfu or ttl:SECONDS, not '" + evict +
                                "'");
  if (admit_after < 1 || admit_after > max_admit_after)
    throw std::invalid_argument("troupe::torch_table '" + name +
                                "': admit_after must be in [1, 255]");
  spec_ = table_spec{std::move(name),
                     static_cast<uint32_t>(dim),
                     static_cast<float>(init_scale),
                     static_cast<uint64_t>(capacity),
                     std::move(evict),
                     static_cast<uint32_t>(admit_after)};
}

void torch_table_impl::hold(torch::Tensor ids, torch::Tensor rows) {
  ids_ = std::move(ids);
  rows_ = std::move(rows);
}

void torch_table_impl::release() {
  ids_ = torch::Tensor();
  rows_ = torch::Tensor();
}

torch::Tensor torch_table_impl::forward(const torch::Tensor& ids) {
  if (!rows_.defined())
    throw std::runtime_error("troupe::torch_table '" + spec_.name +
                             "': no rows were pulled for this pass (a table is read only inside "
                             "a Troupe step or evaluation)");
  const auto wanted = ids.reshape(-1).to(ids_.device(), torch::kLong);
  const int64_t held = ids_.size(0);
  auto at = torch::searchsorted(ids_, wanted).clamp_max(std::max<int64_t>(held - 1, 0));
  const bool found =
      wanted.numel() == 0 || (held > 0 && ids_.index_select(0, at).eq(wanted).all().item<bool>());
  if (!found)
    throw std::out_of_range("troupe::torch_table '" + spec_.name +
                            "': an id that the task's ids did not name for this batch");
  auto shape = ids.sizes().vec();
  shape.push_back(spec_.row_dim);
  return rows_.index_select(0, at).view(shape);
}

}  // namespace troupe
