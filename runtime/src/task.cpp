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

caf::expected<range_result> task_replica::gradient_range_streamed(std::span<const float>, uint32_t,
                                                                  uint64_t, uint32_t,
                                                                  const gradient_put&) {
  return make_error(errc::bad_configuration, "this task does not stream its gradient");
}

caf::expected<range_result> task_replica::gradient_range_streamed(std::span<const float>,
                                                                  sparse_rows_view&, uint32_t,
                                                                  uint64_t, uint32_t,
                                                                  const gradient_put&) {
  return make_error(errc::bad_configuration, "this task does not stream its gradient with rows");
}

caf::expected<float> range_replica::gradient(std::span<const float> params, uint32_t epoch,
                                             uint64_t batch, std::span<float> grad) {
  auto done = gradient_range(params, epoch, batch * batch_, batch_, grad, {});
  if (!done) return std::move(done.error());
  return static_cast<float>(done->loss);
}

std::vector<std::vector<uint64_t>> range_replica::rows_of(uint32_t epoch, uint64_t batch) {
  return rows_of_range(epoch, batch * batch_, batch_);
}

caf::expected<float> range_replica::gradient(std::span<const float> params, sparse_rows_view& rows,
                                             uint32_t epoch, uint64_t batch,
                                             std::span<float> grad) {
  auto done = gradient_range(params, rows, epoch, batch * batch_, batch_, grad);
  if (!done) return std::move(done.error());
  return static_cast<float>(done->loss);
}

}  // namespace troupe
