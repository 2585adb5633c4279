#include "option_flags.hpp"

namespace troupe {

// The flags every binary accepts; the app's own flags are appended.
const std::vector<app_flag>& common_flags() {
  static const std::vector<app_flag> flags = {
      {"role", "ROLE", "coordinator | server | worker; none: everything in this process", ""},
      {"listen", "HOST:PORT",
       "coordinator: where nodes join; server: where workers reach its buckets (default "
       "127.0.0.1:0, any free port)",
       "127.0.0.1:7600"},
      {"coordinator", "HOST:PORT", "the coordinator a server or worker joins", "127.0.0.1:7600"},
      {"secret", "S", "cluster secret; proven, never sent", ""},
      {"insecure", "", "allow --listen on a non-loopback address (see docs/SECURITY.md)", ""},
      {"name", "NAME", "this node's name in logs and reports", ""},
      {"mode", "MODE",
       "ps (parameter service: servers hold the parameters) | dp (data parallel: every worker "
       "holds a replica and gradients are allreduced)",
       "ps"},
      {"collective", "NAME",
       "--mode dp: the allreduce backend between workers: gloo (Gloo over TCP) | actors (CAF "
       "messages) | nccl (NCCL on one GPU per worker; builds with CUDA)",
       "gloo"},
      {"bucket-mb", "X",
       "--mode dp: gradient bucket cap in MiB, packed in backward order (the first is min(1, X))",
       "25"},
      {"no-overlap", "", "--mode dp: start reducing only once the whole backward is done", ""},
      {"host-label", "NAME",
       "--mode dp: the host this worker counts as for two-level reduction (default: the host "
       "name)",
       ""},
      {"reduction", "KIND",
       "--mode dp: flat | two-level (inside each host, then across) | auto (two-level when "
       "several hosts have several workers each)",
       "auto"},
      {"checksum-every", "N",
       "--mode dp: steps between comparisons of the members' parameter checksums (0: at the end "
       "only)",
       "100"},
      {"workers", "N", "workers in the job", "2"},
      {"servers", "M", "parameter servers in the job", "2"},
      {"max-workers", "N", "workers active at once, late joiners included; 0: --workers", "0"},
      {"buckets", "K", "parameter buckets; 0: two per worker", "0"},
      {"epochs", "E", "passes over the training set", "3"},
      {"batch", "B", "examples per worker step", "64"},
      {"lr", "X", "learning rate", "0.001"},
      {"optimizer", "NAME",
       "adam | adamw | sgd | momentum (heavy ball, --momentum) | dash (block Shampoo)", "adam"},
      {"momentum", "MU", "momentum coefficient of --optimizer momentum", "0.9"},
      {"consistency", "MODE", "async | ssp:S (at most S clocks ahead of the slowest) | bsp",
       "async"},
      {"dc", "KIND", "delay compensation: none | linear:L | dcasgd:L | dcasgd-adaptive:L0", "none"},
      {"lr-staleness", "", "scale each update by 1 / (1 + its staleness)", ""},
      {"clip", "C", "clip each embedding row's gradient to L2 norm C (0: off)", "0"},
      {"sync-threshold", "X", "a pull sends only rows that moved more than X (0: all)", "0"},
      {"accumulate", "N", "batches whose gradients are averaged into one push", "1"},
      {"prefetch", "", "pull the next values while a batch computes", ""},
      {"compress", "KIND", "none | sign (1-bit pushes with error feedback)", "none"},
      {"worker-delay-ms", "I:D", "make worker I slower by D ms per batch (I:D,J:E...)", ""},
      {"weight-decay", "WD", "weight decay (decoupled for adam, L2 for sgd)", "0"},
      {"seed", "S", "seed of initialisation and data order", "1"},
      {"report", "FILE", "write the job report (JSON) here when the job ends", ""},
      {"threads", "N", "actor scheduler threads; 0: one per core", "0"},
      {"blas-threads", "N", "OpenBLAS threads per process; 0: cores / workers in it", "0"},
      {"log-level", "LEVEL", "error | warn | info | debug", "info"},
      {"join-timeout", "SECONDS", "how long a node tries to reach the coordinator", "30"},
      {"request-timeout", "SECONDS", "timeout of every request between actors", "30"},
      {"heartbeat-ms", "MS", "how often a server or worker tells the coordinator it is alive",
       "500"},
      {"heartbeat-timeout-ms", "MS", "silence after which the coordinator declares a node lost",
       "2000"},
      {"max-restarts", "N",
       "restarts a node's supervisor allows within the period; one more "
       "escalates",
       "3"},
      {"restart-period-ms", "MS", "the period of --max-restarts", "10000"},
      {"replication", "R", "copies of each bucket on different servers (primary-backup: R <= 2)",
       "1"},
      {"checkpoint-dir", "DIR", "write checkpoints here (coordinator)", ""},
      {"checkpoint-every", "N", "batches between checkpoints; 0: one per epoch", "0"},
      {"checkpoint-keep", "N", "checkpoints kept in --checkpoint-dir", "3"},
      {"resume", "DIR", "continue from the newest good checkpoint in DIR (coordinator)", ""},
      {"metrics-port", "P",
       "serve Prometheus metrics at http://HOST:P/metrics, HOST as in --listen (0: any free "
       "port)",
       ""},
      {"warn-update-variance", "X", "diag warns above this update variance", "0.1"},
      {"warn-loss-oscillation", "X", "diag warns above this mean |loss change| per chunk", "0.5"},
      {"warn-update-ratio", "X", "diag warns below this share of gradients applied", "0.9"},
      {"dash-block", "B", "--optimizer dash: block size (matrices are cut into B x B blocks)",
       "128"},
      {"dash-freq", "F", "--optimizer dash: steps between inverse 4th roots", "10"},
      {"dash-solver", "S", "--optimizer dash: evd | cn | ndb | cheb (inverse-root solver)", "cn"},
      {"dash-storage", "T", "--optimizer dash: fp32 | bf16 | fp16 statistics (fp32 arithmetic)",
       "fp32"},
      {"dash-nesterov", "", "--optimizer dash: precondition Adam's look-ahead moment", ""},
      {"dash-scaling", "S", "--optimizer dash: power | frobenius (bound on lambda_max for roots)",
       "power"},
      {"dash-device", "D",
       "--optimizer dash, servers: cpu | gpu (buckets step DASH on this node's GPU 0; needs cn "
       "and power)",
       "cpu"},
      {"help", "", "print this help", ""},
  };
  return flags;
}

}  // namespace troupe
