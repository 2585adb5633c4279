// Trains the fmnist task in one process (one replica, Adam lr 1e-3, batch 64) and prints the
// test accuracy and wall time of each epoch. Usage: fmnist_train_check [epochs] [data_dir].
// Exit code 0 when the final test accuracy is above 0.80.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/fmnist/mlp_task.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "troupe/error.hpp"

using namespace troupe::fmnist;

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::stoi(argv[1]) : 1;
  const std::string dir = argc > 2 ? argv[2] : default_data_dir;
  auto load_start = std::chrono::steady_clock::now();
  auto task = make_fmnist_task(dir, all_examples, all_examples);
  if (!task) {
    std::fprintf(stderr, "%s\n", troupe::describe(task.error()).c_str());
    return 1;
  }
  std::chrono::duration<double> load_time = std::chrono::steady_clock::now() - load_start;
  std::printf("loaded in %.2f s\n", load_time.count());

  // Step 1: parameters, gradient and Adam moments, all the same flat layout.
  size_t count = 0;
  for (const auto& spec : (*task)->parameters()) {
    size_t n = 1;
    for (uint32_t d : spec.shape) n *= d;
    count += n;
  }
  std::vector<float> params(count), grad(count), m(count), v(count);
  (*task)->initialize(1, params);
  auto before = (*task)->evaluate(params);
  std::printf("epoch 0: test accuracy %.4f, loss %.4f\n", before.accuracy, before.loss);

  // Step 2: one worker holding the whole training set.
  auto replica = (*task)->make_replica(64, 1);
  if (!replica) {
    std::fprintf(stderr, "%s\n", troupe::describe(replica.error()).c_str());
    return 1;
  }
  troupe::kernels::adam_hyper hyper;
  double accuracy = 0;
  for (int e = 0; e < epochs; ++e) {
    auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    const uint64_t steps = (*task)->batches_per_epoch(64);
    for (uint64_t s = 0; s < steps; ++s) {
      loss_sum += *(*replica)->gradient(params, static_cast<uint32_t>(e), s, grad);
      troupe::kernels::adam_step(params, m, v, grad, hyper);
      ++hyper.step;
    }
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    auto eval = (*task)->evaluate(params);
    accuracy = eval.accuracy;
    std::printf("epoch %d: %llu steps in %.2f s, train loss %.4f, test accuracy %.4f, loss %.4f\n",
                e + 1, static_cast<unsigned long long>(steps), took.count(),
                loss_sum / static_cast<double>(steps), eval.accuracy, eval.loss);
  }
  return accuracy > 0.80 ? 0 : 1;
}
