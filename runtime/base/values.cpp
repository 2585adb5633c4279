#include "troupe/values.hpp"

namespace troupe {

size_t dtype_size(dtype type) {
  return type == dtype::f32 ? 4 : 2;
}

uint64_t numel(const std::vector<uint32_t>& shape) {
  uint64_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

std::string to_string(role r) {
  switch (r) {
    case role::coordinator:
      return "coordinator";
    case role::server:
      return "server";
    case role::worker:
      return "worker";
    case role::console:
      return "console";
  }
  return "unknown";
}

}  // namespace troupe
