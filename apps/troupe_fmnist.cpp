// troupe-fmnist: an MLP (784-256-128-10) trained on Fashion-MNIST by Troupe's asynchronous
// parameter service. Without --role everything runs in this process; with --role the same
// binary is the coordinator, a server or a worker of a distributed job (see README.md).
#include <cstdlib>

#include "fmnist/mlp_task.hpp"
#include "fmnist/mnist_data.hpp"
#include "troupe/app.hpp"
#include "troupe/error.hpp"

namespace {

// Reads a non-negative count flag ("" or "0" means no limit).
caf::expected<size_t> limit_flag(const troupe::launch_options& opts, const std::string& flag) {
  const std::string& text = opts.app_value(flag);
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || text[0] == '-')
    return troupe::make_error(troupe::errc::bad_configuration,
                              "--" + flag + " must be a non-negative integer");
  return value == 0 ? troupe::fmnist::all_examples : static_cast<size_t>(value);
}

troupe::app_description fmnist_app() {
  troupe::app_description app;
  app.name = "troupe-fmnist";
  app.summary = "train an MLP on Fashion-MNIST with Troupe's asynchronous parameter service";
  app.flags = {
      {"data", "DIR", "Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist"},
      {"train-limit", "N", "use only the first N training examples (0: all)", "0"},
      {"test-limit", "N", "use only the first N test examples (0: all)", "0"},
  };
  app.make_task = [](const troupe::launch_options& opts)
      -> caf::expected<std::unique_ptr<troupe::training_task>> {
    auto train = limit_flag(opts, "train-limit");
    if (!train) return std::move(train.error());
    auto test = limit_flag(opts, "test-limit");
    if (!test) return std::move(test.error());
    return troupe::fmnist::make_fmnist_task(opts.app_value("data"), *train, *test);
  };
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  return troupe::run_app(argc, argv, fmnist_app());
}
