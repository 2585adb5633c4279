#include "troupe/node.hpp"

#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scoped_actor.hpp>

#include <caf/logger.hpp>

#include <cstdlib>
#include <future>
#include <memory>
#include <thread>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "troupe/detail/auth.hpp"
#include "troupe/detail/join.hpp"
#include "troupe/error.hpp"
#include "troupe/net.hpp"
#include "troupe/tls.hpp"

namespace troupe {

namespace {

// glibc serves every allocation above its mmap threshold (128 KiB at start) with a fresh
// mmap and unmaps it on free, so each message buffer of a push or pull (CAF's, the wire's,
// the decoded tensor's) page-faulted every 4 KiB page in again, zeroed by the kernel: with
// 1 MiB messages that was most of a push's time (troupe-bench pushpull 1 MiB went from 0.26
// to 0.8-1.0 GB/s without it). Buffers up to glibc's largest threshold (32 MiB, above any
// message: codec_limits::max_bytes is 16 MiB) now come from the heap and are reused, and the
// heap is given back to the system only when 256 MiB at its top are free.
void keep_message_buffers() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace

void configure_actor_system(caf::actor_system_config& cfg, const launch_options& opts) {
  keep_message_buffers();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", static_cast<size_t>(opts.threads ? opts.threads : cores));
  cfg.set("middleman.workers", size_t{0});
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.load<caf::io::middleman>();
  if (!opts.tls_dir.empty()) {  // checked by parse_launch_options (tls::check_dir)
    const auto files = tls::files_in(opts.tls_dir);
    cfg.openssl_cafile = files.ca;
    cfg.openssl_certificate = files.cert;
    cfg.openssl_key = files.key;
    cfg.load<caf::openssl::manager>();
    tls::guard_openssl_calls();
  }
  register_protocol(cfg);
}

bool end_actor_system_within(std::function<void()> teardown, std::chrono::seconds bound) {
  caf::logger::set_current_actor_system(nullptr);
  auto ended = std::make_shared<std::promise<void>>();
  auto done = ended->get_future();
  std::thread([teardown = std::move(teardown), ended] {
    teardown();
    ended->set_value();
  }).detach();
  return done.wait_for(bound) == std::future_status::ready;
}

std::string node_name(const launch_options& opts) {
  if (!opts.name.empty()) return opts.name;
  return to_string(opts.role) + "-" + std::to_string(::getpid());
}

void set_blas_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

}  // namespace troupe

// OpenBLAS's own entry points for choosing kernels at run time (exported by DYNAMIC_ARCH
// builds only, hence weak: another build leaves them null and nothing is changed).
extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace troupe {

std::string select_blas_kernels() {
  if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return {};
  if (std::getenv("OPENBLAS_CORETYPE")) return {};  // the user's choice
  const std::string chosen = openblas_get_corename();
  if (chosen != "Prescott") return {};
  const char* better = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
    better = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    better = "Haswell";
  else if (__builtin_cpu_supports("avx"))
    better = "Sandybridge";
  if (!better) return {};
  ::setenv("OPENBLAS_CORETYPE", better, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();  // reads OPENBLAS_CORETYPE
  return "OpenBLAS: " + chosen + " kernels (its choice for a CPU model it does not know) " +
         "replaced by " + openblas_get_corename();
}

namespace {

// The gatekeeper of the first of opts.coordinators that answers, trying them in turn until
// --join-timeout; `where` is set to its address.
caf::expected<gatekeeper_actor> connect_gatekeeper(caf::actor_system& sys,
                                                   const launch_options& opts, const logger& log,
                                                   host_port& where) {
  const auto deadline = std::chrono::steady_clock::now() + opts.join_timeout;
  const std::string all = to_string(opts.coordinators);
  caf::error last = make_error(errc::bad_configuration, "no coordinator address");
  for (int attempt = 0;; ++attempt) {
    for (const auto& at : opts.coordinators) {
      auto gk = net::remote_actor<gatekeeper_actor>(sys, at.host, at.port, opts.request_timeout);
      if (gk) {
        where = at;
        return gk;
      }
      last = std::move(gk.error());
      // A refused handshake does not get better by trying again.
      if (has_code(last, errc::authentication_failed)) return last;
    }
    if (attempt == 0) log.info("waiting for the coordinator at {} ...", all);
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return make_error(errc::timeout, "cannot reach the coordinator at " + all + " within " +
                                       std::to_string(opts.join_timeout.count()) + " s (" +
                                       sys.render(last) + ")");
}

// The handshake with the gatekeeper at `where`: its coordinator for our proof.
caf::expected<coordinator_actor> handshake(caf::actor_system& sys, const gatekeeper_actor& gk,
                                           const launch_options& opts, role sender,
                                           const std::string& name, const host_port& where) {
  caf::scoped_actor self{sys};
  const auth::bytes nonce = auth::random_nonce();
  if (nonce.empty()) return make_error(errc::authentication_failed, "no random bytes");
  caf::expected<challenge> offered = make_error(errc::timeout, "no challenge");
  self->request(gk, opts.request_timeout, hello_atom_v, encode(hello{sender, name, nonce}))
      .receive([&](const wire& w) { offered = decode<challenge>(w); },
               [&](caf::error& err) { offered = std::move(err); });
  if (!offered) return std::move(offered.error());
  if (offered->schema_version != wire_schema_version)  // a gatekeeper of another version
    return make_error(errc::bad_configuration,
                      fmt::format("the coordinator at {} speaks wire schema version {}, this "
                                  "node speaks {}: run the same Troupe version on both",
                                  to_string(where), offered->schema_version, wire_schema_version));
  const auto expected_proof = auth::gatekeeper_proof(opts.secret, nonce, offered->gatekeeper_nonce);
  if (!auth::proofs_match(expected_proof, offered->gatekeeper_proof))
    return make_error(errc::authentication_failed,
                      "the coordinator at " + to_string(where) +
                          " does not know our cluster secret (check --secret / TROUPE_SECRET)");
  const proof mine{offered->session,
                   auth::node_proof(opts.secret, offered->gatekeeper_nonce, nonce, sender, name)};
  caf::expected<coordinator_actor> result = make_error(errc::timeout, "no answer to our proof");
  self->request(gk, opts.request_timeout, prove_atom_v, encode(mine))
      .receive([&](coordinator_actor& c) { result = std::move(c); },
               [&](caf::error& err) { result = std::move(err); });
  return result;
}

}  // namespace

caf::expected<coordinator_actor> join_cluster(caf::actor_system& sys, const launch_options& opts,
                                              role sender, const std::string& name,
                                              const logger& log, host_port* joined) {
  const auto deadline = std::chrono::steady_clock::now() + opts.join_timeout;
  for (bool said = false;; said = true) {
    host_port where;
    auto gk = connect_gatekeeper(sys, opts, log, where);
    if (!gk) return std::move(gk.error());
    if (joined) *joined = where;
    auto admitted = handshake(sys, *gk, opts, sender, name, where);
    // Nothing to join there yet (an app node before its service on servers): again, until
    // --join-timeout.
    if (admitted || !has_code(admitted.error(), errc::not_ready) ||
        std::chrono::steady_clock::now() >= deadline)
      return admitted;
    if (!said) log.info("waiting at {}: {}", to_string(where), describe(admitted.error()));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace troupe
