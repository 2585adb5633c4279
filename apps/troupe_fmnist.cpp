// troupe-fmnist: an MLP (784 -> --hidden widths -> 10, by default 784-256-128-10) trained on
// Fashion-MNIST by Troupe (a parameter service, a data-parallel group, or both). Without --role
// everything runs in this process; with --role the same binary is the coordinator, a server or a
// worker of a distributed job (see README.md).
#include "fmnist/mlp_task.hpp"
#include "fmnist/mnist_data.hpp"
#include "troupe/app.hpp"
#include "troupe/error.hpp"

namespace {

// Reads a limit flag: a count of examples, 0 for all of them.
caf::expected<size_t> limit_flag(const troupe::launch_options& opts, const std::string& flag) {
  auto value = opts.app_number<size_t>(flag);
  if (!value) return value;
  return *value == 0 ? troupe::fmnist::all_examples : *value;
}

troupe::app_description fmnist_app() {
  troupe::app_description app;
  app.name = "troupe-fmnist";
  app.summary = "train an MLP on Fashion-MNIST with Troupe's asynchronous parameter service";
  app.flags = {
      {"data", "DIR", "Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist"},
      {"train-limit", "N", "use only the first N training examples (0: all)", "0",
       troupe::app_flag::whole},
      {"test-limit", "N", "use only the first N test examples (0: all)", "0",
       troupe::app_flag::whole},
      {"hidden", "W1,W2,...", "the MLP's hidden layer widths (every process of a job the same)",
       "256,128"},
  };
  app.make_task = [](const troupe::launch_options& opts)
      -> caf::expected<std::unique_ptr<troupe::training_task>> {
    auto train = limit_flag(opts, "train-limit");
    if (!train) return std::move(train.error());
    auto test = limit_flag(opts, "test-limit");
    if (!test) return std::move(test.error());
    auto hidden =
        troupe::parse_widths("hidden", opts.app_value("hidden"), troupe::fmnist::max_hidden_width);
    if (!hidden) return std::move(hidden.error());
    return troupe::fmnist::make_fmnist_task(opts.app_value("data"), *train, *test, *hidden);
  };
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  return troupe::run_app(argc, argv, fmnist_app());
}
