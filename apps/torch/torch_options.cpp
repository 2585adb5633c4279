#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "troupe/error.hpp"
#include "troupe/torch.hpp"

namespace troupe {

torch_examples tensor_examples(std::vector<torch::Tensor> inputs, torch::Tensor target) {
  const int64_t n = target.size(0);
  return {n, [inputs = std::move(inputs), target = std::move(target)](const torch::Tensor& at) {
            torch_batch batch;
            for (const auto& x : inputs) batch.inputs.push_back(x.index_select(0, at));
            batch.target = target.index_select(0, at);
            return batch;
          }};
}

std::vector<app_flag> torch_flags() {
  return {
      {"torch-threads", "N",
       "intra-op threads of torch (0: this machine's cores / the trainers in this process)", "0",
       app_flag::whole},
      {"device", "DEV", "where the model computes: cpu, or cuda (cuda:N)", "cpu", app_flag::text},
  };
}

caf::error apply_torch_flags(const launch_options& opts, torch_task_options& options) {
  const auto& threads = opts.app_value("torch-threads");
  const unsigned trainers = opts.role == node_role::embedded ? std::max(1u, opts.workers) : 1u;
  long n = std::strtol(threads.c_str(), nullptr, 10);
  if (n > 1024) n = 1024;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / trainers));
  torch::set_num_threads(static_cast<int>(n));
  const auto& name = opts.app_value("device");
  try {
    options.device = torch::Device(name.empty() ? "cpu" : name);
  } catch (const std::exception&) {
    return make_error(errc::bad_configuration,
                      fmt::format("--device {}: not cpu, cuda or cuda:N", name));
  }
  if (options.device.is_cuda() && !torch::cuda::is_available())
    return make_error(
        errc::bad_configuration,
        fmt::format("--device {}: this process has no usable GPU (torch sees none)", name));
  if (!options.device.is_cpu() && !options.device.is_cuda())
    return make_error(errc::bad_configuration,
                      fmt::format("--device {}: only cpu and cuda are supported", name));
  if (options.device.is_cuda() && options.device.has_index() &&
      options.device.index() >= static_cast<int>(torch::cuda::device_count()))
    return make_error(errc::bad_configuration, fmt::format("--device {}: this process sees {} GPUs",
                                                           name, torch::cuda::device_count()));
  return {};
}

}  // namespace troupe
