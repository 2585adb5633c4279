#include "troupe/task.hpp"

#include "troupe/error.hpp"

namespace troupe {

caf::expected<range_result> task_replica::gradient_range(std::span<const float>, uint32_t, uint64_t,
                                                         uint32_t, std::span<float>,
                                                         const gradient_ready&) {
  return make_error(errc::bad_configuration,
                    "this task computes no gradients over example ranges: it cannot run in "
                    "--mode dp");
}

caf::expected<range_result> task_replica::gradient_range(std::span<const float>, sparse_rows_view&,
                                                         uint32_t, uint64_t, uint32_t,
                                                         std::span<float>) {
  return make_error(errc::bad_configuration,
                    "this task computes no gradients with rows over example ranges: it cannot "
                    "run in --mode hybrid");
}

}  // namespace troupe
