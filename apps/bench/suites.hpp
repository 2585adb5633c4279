// The suites of troupe-bench (see ../shared/design/BENCHMARKS.md) and their options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/bench/bench.hpp"

namespace troupe::bench {

struct options {
  size_t size = 0;          // values (apply, pushpull) or 0 for the suite's default
  int reps = 7;             // timed repetitions (median reported)
  std::string self_binary;  // this program, to start the peer process
  std::string tls_dir;      // --tls-dir: the cross-process suites talk mutual TLS
};

suite_result run_apply(const options& o);
suite_result run_messages(const options& o);
suite_result run_pushpull(const options& o);
suite_result run_sparse(const options& o);
suite_result run_dash(const options& o);
suite_result run_dash_gpu(const options& o);  // only in builds with CUDA (TROUPE_BENCH_GPU)
// dash-gpu's rows for a bucket's GPU route against its CPU step (dash_route_bench.cpp, CUDA).
std::vector<row> time_bucket_route(uint32_t n, int reps);

// The peer process of messages and pushpull: publishes a bucket host and an echo actor on
// loopback, runs a raw TCP echo server, prints "ports A B C" and serves until told to stop.
int serve_peer(const std::string& tls_dir);  // `serve`: the peer of the cross-process suites

// train: the fmnist job embedded and as five processes (troupe-fmnist beside this binary),
// its step rate beside the FLOP limit at the sgemm rate measured in the same run.
suite_result run_train(const options& o);

// state: a dp member's state handed over and checkpointed, beside Gloo's broadcast and dd.
suite_result run_state(const options& o);

// allreduce: `members` processes of this program (allreduce-member) on loopback.
suite_result run_allreduce(const options& o, uint32_t members);
int serve_allreduce_member(const std::string& dir, uint32_t rank, uint32_t members, int reps);

}  // namespace troupe::bench
