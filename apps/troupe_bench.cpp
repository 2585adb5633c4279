// troupe-bench SUITE [--size N] [--reps R] [--json FILE] [--tls-dir DIR]: runs one suite of
// benchmarks and prints our figures beside the limit measured in the same run
// (../shared/design/BENCHMARKS.md). Suites: apply, messages, pushpull, sparse, dash, allreduce
// (--members N), train (the fmnist job embedded and as five processes; --reps defaults to 1
// there), state (a dp member's state handed over and checkpointed), and dash-gpu in builds with
// CUDA. --tls-dir (or TROUPE_TLS_DIR) makes the
// cross-process suites (messages, pushpull, sparse) talk mutual TLS, to measure what it costs.
// ("serve" and "allreduce-member" are the processes the others start.)
#include <fmt/format.h>

#include <unistd.h>
#include <csignal>
#include <cstdio>

#include <climits>
#include <cstdlib>
#include <string>

#include "apps/bench/suites.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"
#include "troupe/tls.hpp"

namespace {

std::string self_path(const char* argv0) {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string{argv0};
}

int usage() {
  fmt::print(
      stderr,
      "usage: troupe-bench apply|messages|pushpull|sparse|dash|dash-gpu|allreduce|train|state [--size N] "
      "[--reps R] [--json FILE] [--tls-dir DIR] [--members N (allreduce)]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace troupe::bench;
  if (argc < 2) return usage();
  std::signal(SIGPIPE, SIG_IGN);  // Gloo's sockets (allreduce): a closed peer is an error
  if (const auto note = troupe::select_blas_kernels(); !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  const std::string suite = argv[1];
  const char* tls_env = std::getenv("TROUPE_TLS_DIR");
  const std::string tls_dir = tls_env ? tls_env : "";
  if (suite == "serve") return serve_peer(tls_dir);
  if (suite == "allreduce-member" && argc == 6)
    return serve_allreduce_member(argv[2], uint32_t(std::atoi(argv[3])),
                                  uint32_t(std::atoi(argv[4])), std::max(1, std::atoi(argv[5])));
  options o;
  o.self_binary = self_path(argv[0]);
  o.tls_dir = tls_dir;
  std::string json;
  uint32_t members = 2;
  if (suite == "train") o.reps = 1;  // each repetition is two whole training jobs
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--size")
      o.size = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--reps")
      o.reps = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--json")
      json = value;
    else if (flag == "--tls-dir")
      o.tls_dir = value;
    else if (flag == "--members" && suite == "allreduce")
      members = uint32_t(std::max(2, std::atoi(value.c_str())));
    else
      return usage();
  }
  if (!o.tls_dir.empty())
    if (auto checked = troupe::tls::check_dir(o.tls_dir); !checked) {
      fmt::print(stderr, "troupe-bench: {}\n", troupe::describe(checked.error()));
      return 2;
    }
  suite_result result;
  if (suite == "apply")
    result = run_apply(o);
  else if (suite == "messages")
    result = run_messages(o);
  else if (suite == "pushpull")
    result = run_pushpull(o);
  else if (suite == "sparse")
    result = run_sparse(o);
  else if (suite == "dash")
    result = run_dash(o);
  else if (suite == "allreduce")
    result = run_allreduce(o, members);
  else if (suite == "train")
    result = run_train(o);
  else if (suite == "state")
    result = run_state(o);
#ifdef TROUPE_BENCH_GPU
  else if (suite == "dash-gpu")
    result = run_dash_gpu(o);
#else
  else if (suite == "dash-gpu") {
    fmt::print(stderr, "troupe-bench dash-gpu: this build has no CUDA\n");
    return 1;
  }
#endif
  else
    return usage();
  if (result.rows.empty()) {
    fmt::print(
        stderr, "troupe-bench {}: no figures{}\n", suite,
        suite == "messages" || suite == "pushpull" ? " (could not start the peer process?)" : "");
    return 1;
  }
  print(result);
  if (!json.empty() && !write_json(result, json)) {
    fmt::print(stderr, "troupe-bench: cannot write {}\n", json);
    return 1;
  }
  return 0;
}
