#include "flat_module.hpp"

#include <mutex>
#include <stdexcept>

namespace troupe::torch_detail {

namespace {

std::mutex build_mutex;

std::vector<uint32_t> shape_of(const torch::Tensor& t) {
  std::vector<uint32_t> shape;
  for (auto d : t.sizes()) shape.push_back(static_cast<uint32_t>(d));
  if (shape.empty()) shape.push_back(1);  // a scalar as (1,)
  return shape;
}

}  // namespace

torch_model build_model(const std::function<torch_model()>& factory, uint64_t seed) {
  std::lock_guard lock(build_mutex);
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto saved = generator.get_state();
  torch::manual_seed(seed);
  try {
    auto model = factory();
    generator.set_state(saved);
    if (!model.module || !model.forward)
      throw std::invalid_argument("the model factory gave no module or no forward pass");
    return model;
  } catch (...) {
    generator.set_state(saved);
    throw;
  }
}

torch::Tensor host_view(std::span<const float> values) {
  return torch::from_blob(const_cast<float*>(values.data()), {static_cast<int64_t>(values.size())},
                          torch::kFloat32);
}

torch::Tensor host_view(std::span<float> values) {
  return host_view(std::span<const float>(values));
}

flat_module::flat_module(torch_model model, torch::Device device)
    : model_(std::move(model)), device_(device) {
  auto& module = *model_.module;
  module.to(device_);
  for (const auto& b : module.named_buffers()) {
    names_.push_back(b.key());
    tensors_.push_back(b.value());
  }
  first_param_ = tensors_.size();
  for (const auto& p : module.named_parameters()) {
    if (!p.value().requires_grad())
      throw std::invalid_argument("parameter '" + p.key() +
                                  "' is frozen (requires_grad false); Troupe trains every "
                                  "parameter the model has");
    if (p.value().scalar_type() != torch::kFloat32)
      throw std::invalid_argument("parameter '" + p.key() + "' is not float32");
    names_.push_back(p.key());
    tensors_.push_back(p.value());
    params_.push_back(p.value());
  }
  if (params_.empty()) throw std::invalid_argument("the model has no parameters");
  for (const auto& t : tensors_) offsets_.push_back(offsets_.back() + t.numel());
  viewed_ = device_.is_cpu();
  const auto own = viewed_ ? offsets_[first_param_] : total();
  flat_ = torch::zeros({static_cast<int64_t>(own)},
                       torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    auto& t = tensors_[i];
    if (viewed_ && i >= first_param_) {  // no memory until load() binds it
      t.set_data(torch::zeros({}, t.options()).expand(t.sizes()));
      continue;
    }
    auto view = flat_.narrow(0, offsets_[i], t.numel()).view(t.sizes());
    view.copy_(t);
    if (t.scalar_type() == torch::kFloat32)
      t.set_data(view);  // BatchNorm updates its statistics in place: in the flat
    else
      copied_.emplace_back(t, view);
  }
  for (const auto& m : module.modules())
    if (auto* table = m->as<torch_table_impl>()) tables_.push_back(table);
}

std::vector<tensor_spec> flat_module::specs() const {
  std::vector<tensor_spec> out;
  for (size_t i = 0; i < tensors_.size(); ++i)
    out.push_back(tensor_spec{names_[i], shape_of(tensors_[i]), i < first_param_});
  return out;
}

void flat_module::load(std::span<const float> values) {
  torch::NoGradGuard no_grad;
  const auto all = host_view(values);
  flat_.copy_(all.narrow(0, 0, flat_.numel()));
  if (viewed_ && bound_ != values.data()) {
    for (size_t i = first_param_; i < tensors_.size(); ++i)
      tensors_[i].set_data(
          all.narrow(0, offsets_[i], tensors_[i].numel()).view(tensors_[i].sizes()));
    bound_ = values.data();
  }
  for (auto& [buffer, view] : copied_) buffer.copy_(view);
}

void flat_module::bind_grads(std::span<float> grad) {
  release_grads();
  if (!viewed_ || grad.empty()) return;
  torch::NoGradGuard no_grad;
  auto all = host_view(grad);
  all.narrow(0, offsets_[first_param_], total() - offsets_[first_param_]).zero_();
  for (size_t i = first_param_; i < tensors_.size(); ++i)
    tensors_[i].mutable_grad() =
        all.narrow(0, offsets_[i], tensors_[i].numel()).view(tensors_[i].sizes());
}

void flat_module::release_grads() {
  for (const auto& p : params_) p.mutable_grad().reset();
}

void flat_module::report(size_t i, std::span<float> out) const {
  torch::NoGradGuard no_grad;
  auto target = host_view(out.subspan(offsets_[i], offsets_[i + 1] - offsets_[i]));
  const auto& t = tensors_[i];
  if (i < first_param_)
    target.copy_(t.detach().reshape(-1));  // a buffer's value (cast to float32)
  else if (!t.grad().defined())
    target.zero_();
  else if (t.grad().data_ptr() != target.data_ptr())
    target.copy_(t.grad().reshape(-1));
}

void flat_module::put(size_t i, put_relay& to) const {
  torch::NoGradGuard no_grad;
  const auto& t = tensors_[i];
  const bool buffer = i < first_param_;
  if (!buffer && !t.grad().defined()) return;
  const auto values = (buffer ? t.detach() : t.grad()).reshape(-1).to(torch::kCPU, torch::kFloat);
  const auto host = values.contiguous();
  to.put(i, std::span<const float>(host.data_ptr<float>(), static_cast<size_t>(host.numel())));
  if (!buffer) t.mutable_grad().reset();
}

std::vector<torch::Tensor> flat_module::hold_rows(const sparse_rows_view& rows, bool grad) {
  if (rows.ids.size() != tables_.size() || rows.values.size() != tables_.size())
    throw std::invalid_argument("rows for another number of tables than the model has");
  std::vector<torch::Tensor> leaves;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const auto n = static_cast<int64_t>(rows.ids[t].size());
    auto ids = torch::from_blob(const_cast<uint64_t*>(rows.ids[t].data()), {n}, torch::kLong);
    auto values = host_view(std::span<const float>(rows.values[t]))
                      .view({n, static_cast<int64_t>(tables_[t]->spec().row_dim)})
                      .to(device_)
                      .detach();
    if (grad) values.requires_grad_(true);
    tables_[t]->hold(ids.to(device_), values);
    leaves.push_back(values);
  }
  return leaves;
}

void flat_module::release_rows() {
  for (auto* table : tables_) table->release();
}

void save_values(torch::nn::Module& module, std::span<float> out) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  for (const auto& b : module.named_buffers()) tensors.push_back(b.value());
  for (const auto& p : module.named_parameters()) tensors.push_back(p.value());
  uint64_t at = 0;
  for (const auto& t : tensors) {
    const auto n = static_cast<uint64_t>(t.numel());
    if (at + n > out.size()) throw std::length_error("another number of values");
    host_view(out.subspan(at, n)).copy_(t.detach().reshape(-1).to(torch::kCPU));
    at += n;
  }
  if (at != out.size()) throw std::length_error("another number of values");
}

}  // namespace troupe::torch_detail
