// Node bootstrap: the CAF configuration every Troupe process uses (sharing scheduler sized to
// the cores, the io middleman with no extra worker threads, the protocol's types and error
// category), the node's name, and the BLAS threads and kernels of the process. Call from main()
// or a test.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <functional>

#include "troupe/log.hpp"
#include "troupe/options.hpp"

namespace troupe {

// Applies Troupe's settings to `cfg`: scheduler.policy=sharing, scheduler.max-threads
// (--threads, default one per core), middleman.workers=0, the io middleman, the protocol.
// It also sets the process's allocator (glibc's mmap and trim thresholds) so that message
// buffers up to 32 MiB are reused from the heap instead of mapped and faulted in each time.
void configure_actor_system(caf::actor_system_config& cfg, const launch_options& opts);

// Ends an actor system for a caller that must go on after it (a library call: Python's
// troupe.run, its process runtime at exit): this thread lets go of the system (CAF keeps a
// reference to its logger per thread that spawned, which would hold the system's last wait),
// then `teardown`, which destroys the system, runs on a thread of its own. True when it ended
// within `bound`; false when it is left behind, running (CAF 0.17 can leave an actor that has
// ended never destroyed, issue 1196; a member stuck in user code never ends).
bool end_actor_system_within(std::function<void()> teardown, std::chrono::seconds bound);

// The name of this node in logs and reports: --name, or "<role>-<pid>".
std::string node_name(const launch_options& opts);

// Limits OpenBLAS to `threads` threads for this process (called before compute starts).
void set_blas_threads(int threads);

// OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its kernels from the CPU model when it
// loads, and a model it does not know gets its baseline SSE3 ("Prescott") kernels: 0.3.21 on
// this project's Emerald Rapids machines (model 207) runs SGEMM 1.5-3x slower than with the
// AVX-512 kernels the CPU has. Where OpenBLAS chose "Prescott" and the CPU has AVX-512, AVX2
// or AVX, this selects the matching kernels (as OPENBLAS_CORETYPE would; a value the user set
// is left alone) and returns a line saying so; otherwise it changes nothing and returns "".
// Call it first thing in main, before any BLAS call (run_app and troupe-bench do).
std::string select_blas_kernels();

}  // namespace troupe
