// troupe-bench train: the Fashion-MNIST MLP job of troupe-fmnist (3 epochs, 2 workers,
// batch 64) embedded in one process and as five processes on loopback (a coordinator, two
// servers, two workers), back to back, --reps times each. Its step rate (batches over the
// report's wall_s) is printed beside the rate the model's FLOPs allow at the sgemm rate
// measured in the same run on the job's own matrix shapes, one BLAS thread per core, and the
// five-process rate beside the embedded one.
#include <cblas.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "apps/bench/suites.hpp"
#include "apps/fmnist/mlp_math.hpp"
#include "messages/json.hpp"
#include "troupe/node.hpp"

namespace troupe::bench {

namespace {

namespace fs = std::filesystem;

constexpr uint32_t epochs = 3;
constexpr uint32_t workers = 2;
constexpr uint32_t batch = 64;
constexpr auto job_deadline = std::chrono::minutes(5);

// Multiply-adds of one batch: the forward pass, the weights' gradients and the inputs'
// gradients of every layer but the first (its input is the data).
const std::vector<fmnist::dense_shape>& model_layers() {  // troupe-fmnist's default model
  static const auto shape = *fmnist::mlp_shape::of(fmnist::default_hidden);
  return shape.layers;
}

double flops_per_batch() {
  double flops = 0;
  const auto& layers = model_layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    const double mac = double(batch) * layers[l].in * layers[l].out;
    flops += 2 * mac * (l == 0 ? 2 : 3);
  }
  return flops;
}

// One thread's sgemm calls on the job's shapes: each layer forward (batch x in by out x in,
// transposed), the weights' gradient (out x batch by batch x in) and the inputs' gradient.
void layer_sgemms(std::vector<std::vector<float>>& buffers) {
  const auto& layers = model_layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    const int in = int(layers[l].in), out = int(layers[l].out);
    float* x = buffers[0].data();
    float* w = buffers[1].data();
    float* y = buffers[2].data();
    float* dw = buffers[3].data();
    float* dx = buffers[4].data();  // not x: values fed back round after round drift into
                                    // subnormals, where sgemm runs several times slower
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x, in, w, in, 0.0f,
                y, out);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, y, out, x, in, 0.0f,
                dw, in);
    if (l > 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1.0f, y, out, w, in,
                  0.0f, dx, in);
  }
}

// FLOP/s of the job's sgemms with one thread per core, each on its own buffers (as the
// workers of one machine run them), over at least `seconds`.
double sgemm_flops(double seconds) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  set_blas_threads(1);
  const size_t largest = size_t{batch} * 784 + 256 * 784;
  std::vector<double> rates(cores);
  std::vector<std::thread> threads;
  for (unsigned c = 0; c < cores; ++c)
    threads.emplace_back([&, c] {
      std::vector<std::vector<float>> buffers;
      for (int b = 0; b < 5; ++b) buffers.push_back(random_values(largest, 50 + 5 * c + b, 0.1f));
      layer_sgemms(buffers);  // warm-up
      const auto start = std::chrono::steady_clock::now();
      size_t rounds = 0;
      double elapsed = 0;
      do {
        layer_sgemms(buffers);
        ++rounds;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } while (elapsed < seconds);
      rates[c] = double(rounds) * flops_per_batch() / elapsed;
    });
  for (auto& t : threads) t.join();
  double total = 0;
  for (double r : rates) total += r;
  return total;
}

uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

struct job_run {
  double batches_per_s = 0;
  double wall_s = 0;
  double test_accuracy = 0;
};

std::optional<job_run> read_report(const fs::path& path) {
  std::ifstream in(path);
  const auto doc = json::parse(in, nullptr, false);
  if (!doc.is_object() || doc.value("status", "") != "finished") return std::nullopt;
  job_run r;
  r.wall_s = doc.value("wall_s", 0.0);
  r.test_accuracy = doc.value("test_accuracy", 0.0);
  if (r.wall_s <= 0) return std::nullopt;
  r.batches_per_s = doc.value("steps", 0.0) / r.wall_s;
  return r;
}

std::vector<std::string> job_flags(const fs::path& report) {
  return {"--epochs",  std::to_string(epochs),  "--batch",  std::to_string(batch),
          "--workers", std::to_string(workers), "--report", report.string()};
}

std::optional<job_run> run_embedded(const std::string& fmnist, const fs::path& dir) {
  std::vector<std::string> args = {fmnist};
  for (auto& f : job_flags(dir / "embedded.json")) args.push_back(f);
  const int pid = spawn_logged(args, (dir / "embedded.log").string(), true);
  if (!wait_for_exit(pid, std::chrono::steady_clock::now() + job_deadline)) return std::nullopt;
  return read_report(dir / "embedded.json");
}

// The coordinator, two servers and two workers, each its own process, on loopback.
std::optional<job_run> run_processes(const std::string& fmnist, const fs::path& dir) {
  const std::string address = fmt::format("127.0.0.1:{}", free_loopback_port());
  std::random_device random;
  const std::vector<std::string> env = {
      fmt::format("TROUPE_SECRET=bench-{:x}{:x}{:x}", random(), random(), random())};
  std::vector<std::string> coordinator = {fmnist,      "--role", "coordinator", "--listen", address,
                                          "--servers", "2"};
  for (auto& f : job_flags(dir / "processes.json")) coordinator.push_back(f);
  std::vector<int> pids = {spawn_logged(coordinator, (dir / "c.log").string(), true, env)};
  for (const char* role : {"server", "server", "worker", "worker"})
    pids.push_back(spawn_logged({fmnist, "--role", role, "--coordinator", address},
                                (dir / fmt::format("{}{}.log", role, pids.size())).string(), true,
                                env));
  const auto deadline = std::chrono::steady_clock::now() + job_deadline;
  bool ok = true;
  for (int pid : pids) ok = wait_for_exit(pid, deadline) && ok;
  if (!ok) return std::nullopt;
  return read_report(dir / "processes.json");
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

row rate_row(const std::string& name, const std::vector<job_run>& runs, double limit,
             const std::string& limit_name) {
  std::vector<double> rates, walls, accuracies;
  for (const auto& r : runs) {
    rates.push_back(r.batches_per_s);
    walls.push_back(r.wall_s);
    accuracies.push_back(r.test_accuracy);
  }
  row out{name, "batches/s"};
  out.ours = median(rates);
  out.ours_min = *std::min_element(rates.begin(), rates.end());
  out.ours_max = *std::max_element(rates.begin(), rates.end());
  out.limit = limit;
  out.limit_name = limit_name;
  out.extra = {{"wall_s", fmt::format("{:.4g}", median(walls))},
               {"test_accuracy", fmt::format("{:.4f}", median(accuracies))}};
  return out;
}

}  // namespace

suite_result run_train(const options& o) {
  suite_result result{"train", {}};
  const std::string fmnist = (fs::path(o.self_binary).parent_path() / "troupe-fmnist").string();
  if (!fs::exists(fmnist)) {
    fmt::print(stderr, "troupe-bench train: no {}\n", fmnist);
    return result;
  }
  const fs::path dir = fs::temp_directory_path() / fmt::format("troupe-train-{}", ::getpid());
  fs::create_directories(dir);
  std::vector<job_run> embedded, processes;
  for (int rep = 0; rep < o.reps; ++rep) {  // back to back, so that both see the same machine
    auto one = run_embedded(fmnist, dir);
    auto five = run_processes(fmnist, dir);
    if (!one || !five) {
      fmt::print(stderr, "troupe-bench train: a job failed; its logs are in {}\n", dir.string());
      return result;
    }
    embedded.push_back(*one);
    processes.push_back(*five);
  }
  const double limit = sgemm_flops(1.0) / flops_per_batch();
  const std::string flop_limit = "FLOPs at sgemm rate, same run";
  result.rows.push_back(rate_row("fmnist embedded, 2 workers", embedded, limit, flop_limit));
  result.rows.push_back(rate_row("fmnist 5 processes, 2 workers", processes, limit, flop_limit));
  result.rows.push_back(rate_row("fmnist 5 processes vs embedded", processes, result.rows[0].ours,
                                 "embedded job, same run"));
  fs::remove_all(dir);
  return result;
}

}  // namespace troupe::bench
