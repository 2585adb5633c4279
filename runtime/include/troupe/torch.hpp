// troupe/torch.hpp: a model written with libtorch as a Troupe training task (the library
// troupe_torch, package target troupe::torch, built where libtorch is found). The same
// mapping as the Python package's TorchTask (docs/torch.md): the flat vector is the module's
// named_buffers() (tensor_spec::buffer: they follow DDP) then its named_parameters(); autograd
// computes the gradient, each tensor told final as backward accumulates it; troupe::torch_table
// modules are embedding tables on the parameter service, looked up by id. For apps: build the
// options in app_description::make_task and return make_torch_task(options); add torch_flags()
// to the app's flags. The task's methods may be called from any thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "troupe/options.hpp"
#include "troupe/task.hpp"

namespace troupe {

// A batch: the arguments of the model's forward pass, and the loss's target.
struct torch_batch {
  std::vector<torch::Tensor> inputs;
  torch::Tensor target;
};

// A model: its module (what Troupe trains and moves to the device) and its forward pass over
// a batch's inputs.
struct torch_model {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> forward;
};

// The model of a module holder whose forward takes one tensor (a TORCH_MODULE(Net)).
template <class Holder>
torch_model single_input_model(Holder holder) {
  return {holder.ptr(), [holder](const std::vector<torch::Tensor>& inputs) mutable {
            return holder->forward(inputs.at(0));
          }};
}

// Examples by index: how many, and the batch of any of them (`indices`: int64, 1-D, on the CPU).
struct torch_examples {
  int64_t size = 0;
  std::function<torch_batch(const torch::Tensor& indices)> fetch;
};

// Examples held whole in tensors indexed along their first dimension.
torch_examples tensor_examples(std::vector<torch::Tensor> inputs, torch::Tensor target);

struct torch_task_options {
  // A new model; Troupe calls it after torch::manual_seed(seed), so that every process builds
  // the same initial model (its random draws do not disturb other threads' generator).
  std::function<torch_model()> model;
  torch_examples train;
  torch_examples test;
  // The batch's mean loss (default: cross entropy), and how many predictions are right
  // (default: arg max of the output against the target).
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  std::function<int64_t(const torch::Tensor& output, const torch::Tensor& target)> correct;
  int64_t eval_batch = 1000;  // examples per forward pass of the evaluation
  // Tell Troupe each parameter's gradient as backward accumulates it (--mode dp overlaps its
  // allreduce with the rest of backward). A model whose graph changes between steps: false.
  bool overlap = true;
  // A model with troupe::torch_table modules: the ids each table reads for a batch's inputs,
  // by table name (any shape, integers >= 0). Every table must be named.
  std::function<std::map<std::string, torch::Tensor>(const std::vector<torch::Tensor>&)> ids;
  // Where the model computes (--device); the parameters Troupe holds stay on the host.
  torch::Device device = torch::kCPU;
};

// A task from `options`; errc::bad_configuration for options that cannot make one (no model,
// no training examples, a frozen or non-float32 parameter, tables without ids), with the
// reason. Builds the model once to read its tensors.
caf::expected<std::unique_ptr<training_task>> make_torch_task(torch_task_options options);

// An embedding table on the parameter service (troupe.Table's twin): rows of `dim` floats
// keyed by 64-bit ids, created on first use with values uniform in [-init_scale, init_scale],
// at most `capacity` of them. forward(ids) returns ids.sizes() + {dim}; an id the task's `ids`
// did not name for the batch throws (the step fails with that message).
class torch_table_impl : public torch::nn::Module {
 public:
  // evict and admit_after as table_spec's (troupe/task.hpp).
  torch_table_impl(std::string name, int64_t dim, double init_scale = 0.01,
                   int64_t capacity = int64_t{1} << 22, std::string evict = "none",
                   int64_t admit_after = 1);
  torch::Tensor forward(const torch::Tensor& ids);

  const table_spec& spec() const { return spec_; }
  // The rows this pass reads (ids sorted and unique, rows ids x dim): set by Troupe.
  void hold(torch::Tensor ids, torch::Tensor rows);
  void release();

 private:
  table_spec spec_;
  torch::Tensor ids_, rows_;
};
TORCH_MODULE_IMPL(torch_table, torch_table_impl);

// The flags of every torch app: --torch-threads N and --device cpu|cuda.
std::vector<app_flag> torch_flags();

// Applies those flags to this process and to `options`: torch's intra-op threads (default:
// this machine's cores / the trainers in this process) and the device; errc::bad_configuration
// for --device cuda without a usable GPU, or another device name.
caf::error apply_torch_flags(const launch_options& opts, torch_task_options& options);

}  // namespace troupe
