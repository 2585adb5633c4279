// make_torch_task: the training_task of troupe/torch.hpp. A replica holds its own model
// (flat_module) and computes any range of any epoch: the epoch's order is torch::randperm from
// (seed, epoch), as the Python package's TorchTask draws it, so that both see the same steps.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>
#include <tuple>

#include "flat_module.hpp"
#include "troupe/error.hpp"
#include "troupe/ready_relay.hpp"
#include "troupe/torch.hpp"

namespace troupe {

namespace {

using torch_detail::flat_module;
using torch_detail::host_view;

caf::error failed(const std::string& doing, const std::string& why) {
  return make_error(errc::task_failed, fmt::format("{}: {}", doing, why));
}

// Runs `call`; an exception (the user's code, torch's checks) becomes errc::task_failed.
template <class F>
auto guarded(const std::string& doing, F call) -> caf::expected<decltype(call())> {
  try {
    return call();
  } catch (const std::exception& e) {
    return failed(doing, e.what());
  }
}

std::vector<uint64_t> to_ids(const torch::Tensor& sorted) {
  const auto cpu = sorted.to(torch::kCPU, torch::kLong).contiguous();
  const auto* p = cpu.data_ptr<int64_t>();
  return std::vector<uint64_t>(p, p + cpu.numel());
}

// What the task shares with its replicas: the options, and the tables' specs.
struct shared_task {
  torch_task_options options;
  std::vector<table_spec> tables;

  // The sorted unique ids each table reads for a batch's inputs (none without tables).
  std::vector<torch::Tensor> rows_read(const std::vector<torch::Tensor>& inputs) const {
    std::vector<torch::Tensor> out;
    if (tables.empty()) return out;
    const auto named = options.ids(inputs);
    for (const auto& t : tables) {
      auto it = named.find(t.name);
      if (it == named.end())
        throw std::invalid_argument("ids named no ids for table '" + t.name + "'");
      if (it->second.is_floating_point() || it->second.scalar_type() == torch::kBool)
        throw std::invalid_argument("table '" + t.name + "': ids must be integers");
      auto ids = std::get<0>(at::_unique(it->second.reshape(-1).to(torch::kCPU, torch::kLong)));
      if (ids.numel() > 0 && ids[0].item<int64_t>() < 0)
        throw std::invalid_argument("table '" + t.name + "': a negative id");
      out.push_back(ids);
    }
    if (named.size() != tables.size())
      throw std::invalid_argument("ids named a table the model does not have");
    return out;
  }
};

// One step's state, shared with the hooks on the gradient accumulators.
struct step_state {
  flat_module* model = nullptr;
  std::span<float> grad;
  std::shared_ptr<ready_relay> relay;
  std::shared_ptr<put_relay> puts;  // --zero-stage 2: each gradient put, not written to grad
  std::vector<uint32_t> fired, uses;
  std::vector<bool> told;
  bool overlap = false;
  bool active = false;

  void report(size_t i) {
    if (told[i]) return;
    told[i] = true;
    if (puts) return model->put(i, *puts);
    model->report(i, grad);
    if (relay) relay->tell(i);
  }
};

struct accumulated_hook : torch::autograd::FunctionPostHook {
  std::shared_ptr<step_state> step;
  size_t index;
  accumulated_hook(std::shared_ptr<step_state> s, size_t i) : step(std::move(s)), index(i) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    auto& s = *step;
    if (!s.active) return outputs;
    ++s.fired[index];
    if (s.overlap && s.fired[index] == s.uses[index]) s.report(index);
    return outputs;
  }
};

class torch_replica : public range_replica {
 public:
  torch_replica(std::shared_ptr<const shared_task> task, uint32_t batch, uint64_t seed)
      : range_replica(batch),
        task_(std::move(task)),
        seed_(seed),
        model_(torch_detail::build_model(task_->options.model, seed), task_->options.device),
        step_(std::make_shared<step_state>()) {
    step_->model = &model_;
    for (size_t j = 0; j < model_.parameters().size(); ++j) {
      auto accumulator = torch::autograd::impl::grad_accumulator(model_.parameters()[j]);
      accumulator->add_post_hook(
          std::make_unique<accumulated_hook>(step_, model_.first_parameter() + j));
      accumulators_.push_back(std::move(accumulator));
    }
  }

  caf::expected<range_result> gradient_range(std::span<const float> params, uint32_t epoch,
                                             uint64_t first, uint32_t count, std::span<float> grad,
                                             const gradient_ready& ready) override {
    if (!task_->tables.empty())
      return failed("the task's gradient_range",
                    "this model has troupe::torch_tables: it runs in --mode ps or --mode hybrid");
    return step(params, nullptr, epoch, first, count, grad, ready);
  }

  bool streams_gradients() const override { return true; }
  caf::expected<range_result> gradient_range_streamed(std::span<const float> params, uint32_t epoch,
                                                      uint64_t first, uint32_t count,
                                                      const gradient_put& put) override {
    if (!task_->tables.empty())
      return failed("the task's gradient_range",
                    "this model has troupe::torch_tables: it runs in --mode ps or --mode hybrid");
    return step(params, nullptr, epoch, first, count, {}, {}, &put);
  }
  caf::expected<range_result> gradient_range_streamed(std::span<const float> params,
                                                      sparse_rows_view& rows, uint32_t epoch,
                                                      uint64_t first, uint32_t count,
                                                      const gradient_put& put) override {
    if (rows_error_) return std::exchange(rows_error_, caf::error{});
    return step(params, &rows, epoch, first, count, {}, {}, &put);
  }

  std::vector<std::vector<uint64_t>> rows_of_range(uint32_t epoch, uint64_t first,
                                                   uint32_t count) override {
    std::vector<std::vector<uint64_t>> out(task_->tables.size());
    auto read = guarded("the task's ids", [&] { return examples(epoch, first, count); });
    if (!read) {
      rows_error_ = std::move(read.error());
      return out;
    }
    for (size_t t = 0; t < out.size() && t < cached_->rows.size(); ++t)
      out[t] = to_ids(cached_->rows[t]);
    return out;
  }

  caf::expected<range_result> gradient_range(std::span<const float> params, sparse_rows_view& rows,
                                             uint32_t epoch, uint64_t first, uint32_t count,
                                             std::span<float> grad) override {
    if (rows_error_) return std::exchange(rows_error_, caf::error{});
    return step(params, &rows, epoch, first, count, grad, {});
  }

 private:
  struct read_range {
    std::tuple<uint32_t, uint64_t, uint32_t> key;
    std::optional<torch_batch> batch;  // none past the epoch's end
    std::vector<torch::Tensor> rows;   // per table, sorted unique ids
  };

  // Epoch `epoch`'s order of the training examples, the same in every process.
  const torch::Tensor& order(uint32_t epoch) {
    if (order_epoch_ != epoch || !order_.defined()) {
      const uint64_t s = (seed_ * 1'000'003 + epoch) % (uint64_t{1} << 63);
      auto generator = at::detail::createCPUGenerator(s);
      order_ = torch::randperm(task_->options.train.size, generator, torch::kLong);
      order_epoch_ = epoch;
    }
    return order_;
  }

  // The examples of a range and their rows; the last range is kept (a step asks its rows
  // first, then its gradient).
  const read_range& examples(uint32_t epoch, uint64_t first, uint32_t count) {
    const auto key = std::make_tuple(epoch, first, count);
    if (cached_ && cached_->key == key) return *cached_;
    read_range r{key, std::nullopt, {}};
    const auto n = static_cast<uint64_t>(task_->options.train.size);
    const uint64_t end = std::min<uint64_t>(first + count, n);
    if (first < end) {
      auto indices =
          order(epoch).narrow(0, static_cast<int64_t>(first), static_cast<int64_t>(end - first));
      r.batch = task_->options.train.fetch(indices);
      r.rows = task_->rows_read(r.batch->inputs);
    }
    cached_ = std::move(r);
    return *cached_;
  }

  // Forward and backward of one range (with `rows` for tables), told as tensors are final;
  // or, with `put` (--zero-stage 2), each tensor's gradient put and its .grad freed.
  caf::expected<range_result> step(std::span<const float> params, sparse_rows_view* rows,
                                   uint32_t epoch, uint64_t first, uint32_t count,
                                   std::span<float> grad, const gradient_ready& ready,
                                   const gradient_put* put = nullptr) {
    std::shared_ptr<ready_relay> relay;
    if (ready) relay = std::make_shared<ready_relay>(ready);
    std::shared_ptr<put_relay> puts;
    if (put) puts = std::make_shared<put_relay>(*put);
    auto out = guarded("the task's gradient_range", [&]() -> range_result {
      const auto& read = examples(epoch, first, count);
      if (!read.batch) {
        std::fill(grad.begin(), grad.end(), 0.0f);
        return {0.0, 0};
      }
      model_.load(params);
      auto leaves = rows ? model_.hold_rows(*rows, true) : std::vector<torch::Tensor>{};
      model_.bind_grads(grad);  // (an empty `grad` binds none)
      const double loss = backward(*read.batch, grad, relay, puts);
      add_row_gradients(rows, leaves);
      return {loss, static_cast<uint64_t>(read.batch->target.size(0))};
    });
    model_.release_rows();
    model_.release_grads();  // no view of `grad` outlives the call
    step_->active = false;
    step_->puts.reset();
    if (relay) relay->close(bool(out));
    if (puts) puts->close(bool(out));
    if (out && out->count > count)
      return failed("the task's gradient_range", "more examples than asked");
    return out;
  }

  double backward(const torch_batch& batch, std::span<float> grad,
                  std::shared_ptr<ready_relay> relay, std::shared_ptr<put_relay> puts) {
    auto& s = *step_;
    const size_t k = model_.tensor_count();
    s.grad = grad;
    s.relay = std::move(relay);
    s.puts = std::move(puts);
    s.fired.assign(k, 0);
    s.told.assign(k, false);
    s.overlap = task_->options.overlap && (s.relay || s.puts) && !s.uses.empty();
    s.active = true;
    const auto& device = model_.device();
    std::vector<torch::Tensor> inputs;
    for (const auto& x : batch.inputs) inputs.push_back(x.to(device));
    auto loss = task_->options.loss(model_.forward(inputs), batch.target.to(device));
    loss.backward();
    s.active = false;
    if (s.uses.empty())
      s.uses = s.fired;
    else if (s.overlap && s.fired != s.uses)
      throw std::runtime_error(
          "backward accumulated a parameter another number of times than in the first step "
          "(the graph changed); set torch_task_options::overlap to false");
    for (size_t i = 0; i < k; ++i) s.report(i);
    return loss.item<double>();
  }

  static void add_row_gradients(sparse_rows_view* rows, const std::vector<torch::Tensor>& leaves) {
    if (!rows) return;
    torch::NoGradGuard no_grad;
    for (size_t t = 0; t < leaves.size(); ++t)
      if (leaves[t].grad().defined())
        host_view(std::span<float>(rows->grads[t])).add_(leaves[t].grad().reshape(-1).cpu());
  }

  std::shared_ptr<const shared_task> task_;
  uint64_t seed_;
  flat_module model_;
  std::shared_ptr<step_state> step_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::optional<uint32_t> order_epoch_;
  torch::Tensor order_;
  std::optional<read_range> cached_;
  caf::error rows_error_;  // from the last rows_of_range, for the gradient that follows
};

class torch_task : public training_task {
 public:
  torch_task(std::shared_ptr<const shared_task> task, std::vector<tensor_spec> specs,
             flat_module evaluator)
      : task_(std::move(task)), specs_(std::move(specs)), evaluator_(std::move(evaluator)) {}

  std::vector<tensor_spec> parameters() const override { return specs_; }

  // A model that cannot be built here (make_torch_task built one) gives NaN, which the job
  // refuses, rather than values nobody chose.
  void initialize(uint64_t seed, std::span<float> params) const override {
    auto done = guarded("the task's model", [&] {
      auto model = torch_detail::build_model(task_->options.model, seed);
      torch_detail::save_values(*model.module, params);
      return true;
    });
    if (!done) std::fill(params.begin(), params.end(), std::numeric_limits<float>::quiet_NaN());
  }

  uint64_t batches_per_epoch(uint32_t batch) const override {
    const auto n = static_cast<uint64_t>(task_->options.train.size);
    return batch ? (n + batch - 1) / batch : 0;
  }

  caf::expected<std::unique_ptr<task_replica>> make_replica(uint32_t batch,
                                                            uint64_t seed) const override {
    if (batch == 0) return make_error(errc::bad_configuration, "torch task: batch size 0");
    return guarded("the task's model", [&] {
      return std::unique_ptr<task_replica>(new torch_replica(task_, batch, seed));
    });
  }

  evaluation evaluate(std::span<const float> params) const override {
    return evaluate_with(params, nullptr);
  }

  std::vector<table_spec> sparse_tables() const override { return task_->tables; }

  std::vector<std::vector<uint64_t>> evaluation_rows() const override {
    std::vector<std::vector<uint64_t>> out(task_->tables.size());
    if (out.empty()) return out;
    std::lock_guard lock(mutex_);
    auto ids = guarded("the task's ids", [&] {
      std::vector<torch::Tensor> all(out.size());
      const auto& test = task_->options.test;
      for (int64_t at = 0; at < test.size; at += task_->options.eval_batch) {
        const auto n = std::min(task_->options.eval_batch, test.size - at);
        const auto read = task_->rows_read(test.fetch(torch::arange(at, at + n)).inputs);
        for (size_t t = 0; t < all.size(); ++t)
          all[t] = all[t].defined() ? torch::cat({all[t], read[t]}) : read[t];
      }
      return all;
    });
    if (!ids) return out;  // the evaluation then fails and says why
    for (size_t t = 0; t < out.size(); ++t)
      if ((*ids)[t].defined()) out[t] = to_ids(std::get<0>(at::_unique((*ids)[t])));
    return out;
  }

  evaluation evaluate(std::span<const float> params, const sparse_rows_view& rows) const override {
    return evaluate_with(params, &rows);
  }

 private:
  evaluation evaluate_with(std::span<const float> params, const sparse_rows_view* rows) const {
    std::lock_guard lock(mutex_);
    auto done = guarded("the task's evaluation", [&] {
      torch::NoGradGuard no_grad;
      evaluator_.load(params);
      if (!evaluator_.tables().empty()) {
        if (!rows) throw std::invalid_argument("the evaluation has no rows for the model's tables");
        evaluator_.hold_rows(*rows, false);
      }
      evaluator_.module().eval();
      const auto& test = task_->options.test;
      int64_t right = 0;
      double loss_sum = 0;
      for (int64_t at = 0; at < test.size; at += task_->options.eval_batch) {
        const auto n = std::min(task_->options.eval_batch, test.size - at);
        const auto batch = test.fetch(torch::arange(at, at + n));
        std::vector<torch::Tensor> inputs;
        for (const auto& x : batch.inputs) inputs.push_back(x.to(evaluator_.device()));
        const auto target = batch.target.to(evaluator_.device());
        const auto output = evaluator_.forward(inputs);
        right += task_->options.correct(output, target);
        loss_sum += task_->options.loss(output, target).item<double>() * double(n);
      }
      const double n = static_cast<double>(test.size);
      return test.size ? evaluation{double(right) / n, loss_sum / n} : evaluation{0, 0};
    });
    evaluator_.release_rows();
    evaluator_.module().train();
    if (done) return *done;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return evaluation{nan, nan};
  }

  std::shared_ptr<const shared_task> task_;
  std::vector<tensor_spec> specs_;
  mutable std::mutex mutex_;
  mutable flat_module evaluator_;
};

// The defaults of options the app left out.
void fill_defaults(torch_task_options& o) {
  if (!o.loss)
    o.loss = [](const torch::Tensor& output, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(output, target);
    };
  if (!o.correct)
    o.correct = [](const torch::Tensor& output, const torch::Tensor& target) {
      return output.argmax(1).eq(target).sum().item<int64_t>();
    };
}

}  // namespace

caf::expected<std::unique_ptr<training_task>> make_torch_task(torch_task_options options) {
  auto bad = [](const std::string& why) {
    return make_error(errc::bad_configuration, "torch task: " + why);
  };
  if (!options.model) return bad("no model");
  if (options.train.size <= 0 || !options.train.fetch) return bad("no training examples");
  if (options.test.size < 0 || (options.test.size > 0 && !options.test.fetch))
    return bad("the test examples cannot be fetched");
  if (options.eval_batch <= 0) return bad("eval_batch must be positive");
  fill_defaults(options);
  auto probe = guarded("building the model", [&] {
    return flat_module(torch_detail::build_model(options.model, 0), options.device);
  });
  if (!probe) return make_error(errc::bad_configuration, describe(probe.error()));
  auto task = std::make_shared<shared_task>();
  for (auto* t : probe->tables()) {
    for (const auto& known : task->tables)
      if (known.name == t->spec().name) return bad("two tables are named " + known.name);
    task->tables.push_back(t->spec());
  }
  if (!task->tables.empty() && !options.ids)
    return bad("the model has troupe::torch_tables: give options.ids, the rows each batch reads");
  task->options = std::move(options);
  auto specs = probe->specs();
  return std::unique_ptr<training_task>(new torch_task(task, std::move(specs), std::move(*probe)));
}

}  // namespace troupe
