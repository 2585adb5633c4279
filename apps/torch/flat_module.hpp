// flat_module: a libtorch model laid out as Troupe's flat vector (buffers first: the layout of
// troupe/torch.hpp), and its troupe::torch_table modules. On the CPU its parameters are views
// of Troupe's parameter values and their gradients views of Troupe's gradient buffer
// (bind_grads), so a member holds each value once, as under DDP; on another device they are
// views of one flat tensor there, loaded with one copy. Buffers (BatchNorm's statistics, which
// the forward pass updates in place) are the module's own, copied in at each load. Internal to
// troupe_torch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "troupe/ready_relay.hpp"
#include "troupe/task.hpp"
#include "troupe/torch.hpp"

namespace troupe::torch_detail {

// factory() with its random draws from `seed` alone: torch's global generator is seeded for
// the call and put back after, under one lock for every build in the process.
torch_model build_model(const std::function<torch_model()>& factory, uint64_t seed);

class flat_module {
 public:
  flat_module(torch_model model, torch::Device device);

  // The tensors in layout order: (name, shape, buffer?) as Troupe's tensor specs.
  std::vector<tensor_spec> specs() const;
  uint64_t total() const { return offsets_.back(); }

  // Every buffer and parameter from `values` (total() of them), which must not change while
  // the module computes with them: on the CPU the parameters view them.
  void load(std::span<const float> values);
  // Each parameter's gradient undefined, or on the CPU a view of `grad` (zeroed; total()
  // values), where backward accumulates in place (none when `grad` is empty). Call
  // release_grads() before `grad` goes.
  void bind_grads(std::span<float> grad);
  void release_grads();
  // Tensor i's gradient (a buffer's value) into `out`: zeros when it has none, nothing to copy
  // when backward wrote it there.
  void report(size_t i, std::span<float> out) const;
  // --zero-stage 2: tensor i's gradient (a buffer's value) to `to`, as float32 on the host, and
  // a parameter's .grad freed; nothing when it has none (Troupe counts zeros).
  void put(size_t i, put_relay& to) const;

  // Gives each table its rows (`rows` holds one entry per table), on the device; with `grad`,
  // as leaves whose .grad backward fills, returned. Throws when the rows do not fit.
  std::vector<torch::Tensor> hold_rows(const sparse_rows_view& rows, bool grad);
  void release_rows();

  torch::Tensor forward(const std::vector<torch::Tensor>& inputs) { return model_.forward(inputs); }
  torch::nn::Module& module() { return *model_.module; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  size_t first_parameter() const { return first_param_; }
  size_t tensor_count() const { return tensors_.size(); }
  const std::vector<torch_table_impl*>& tables() const { return tables_; }
  torch::Device device() const { return device_; }

 private:
  torch_model model_;
  torch::Device device_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> tensors_;  // buffers, then parameters
  std::vector<torch::Tensor> params_;
  size_t first_param_ = 0;
  std::vector<uint64_t> offsets_{0};
  bool viewed_ = false;           // on the CPU: the parameters view Troupe's values
  const float* bound_ = nullptr;  // the values they view
  torch::Tensor flat_;            // the buffers' values (and, off the CPU, the parameters')
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copied_;  // non-float32 buffers, views
  std::vector<torch_table_impl*> tables_;
};

// A freshly built model's buffers, then its parameters, into `out` (Troupe's layout); throws
// when `out` holds another number of values.
void save_values(torch::nn::Module& module, std::span<float> out);

// A float32 CPU tensor over `values` (no copy; valid while they are).
torch::Tensor host_view(std::span<const float> values);
torch::Tensor host_view(std::span<float> values);

}  // namespace troupe::torch_detail
