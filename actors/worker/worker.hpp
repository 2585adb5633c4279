// worker: one training worker. It joins the coordinator, and once started claims chunks of
// batches from the coordinator (one chunk in reserve) and for each: pulls every bucket,
// computes the chunk's averaged gradient, pushes each bucket its slice stamped with the bucket
// clock it read, and reports the chunk done. Under --mode diloco a chunk is a round of local
// steps instead, and what it pushes is a pseudo-gradient (actors/worker/local_rounds.hpp). With
// prefetch the next pull is in flight while a chunk computes. When no work is left it says done.
// Its pulls and pushes go through a bucket_client (actors/client), which sends a request whose
// bucket is gone (restarted, or its server lost) again to the handle the coordinator names now (a
// push marked as a resend, so it is never applied twice). Spawn it detached: gradient() runs inside
// its handler and must not hold a CAF scheduler thread, and a data lane writes from the worker's
// thread.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/supervision/failure/coordinator_link.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "actors/transport/bucket_client.hpp"
#include "actors/worker/local_rounds.hpp"
#include "messages/protocol.hpp"
#include "troupe/detail/layout.hpp"
#include "troupe/log.hpp"
#include "troupe/task.hpp"

namespace troupe {

struct worker_config {
  coordinator_link_ptr coordinator;
  std::shared_ptr<const training_task> task;
  std::string name;
  std::chrono::seconds request_timeout{30};
  caf::actor_addr supervisor;
  logger log;
  std::shared_ptr<metrics_registry> metrics;  // the node's; none: no metrics
  std::string host_label;                     // sent with the join: the host this worker is on
  // Called with start_job's workers_on_host (when known): a worker process sizes its BLAS
  // threads to its share of the host's cores. None: leave them (embedded jobs size them).
  std::function<void(uint32_t workers_on_host)> share_cores;
  // The cluster secret, for the servers' data lanes (actors/lane); empty: CAF carries every
  // push and pull.
  std::string lane_secret;
};

// The coordinator protocol in batches (one claim and one progress report per step cost the
// coordinator's node ~12,000 wake-ups in a 3-epoch fmnist job): a claim asks for up to
// lease_chunks chunks and goes out again once fewer than claim_below are left; finished chunks
// are reported once report_every of them wait or the oldest has waited report_within, and
// always before the worker says done, answers a pause, or runs out of claimed work. A worker
// lost with chunks finished but not reported has them done again by others (as a lost worker's
// current chunk always was): at most report_every chunks, or report_within of its work.
constexpr uint32_t lease_chunks = 8;
constexpr size_t claim_below = 2;
constexpr size_t report_every = 8;
constexpr std::chrono::milliseconds report_within{50};

struct worker_state {
  static inline const char* name = "troupe.worker";
  std::optional<start_job> job;
  std::optional<flat_layout> layout;
  std::unique_ptr<task_replica> replica;
  // The buckets, through the data lane of each server node that has one (actors/client).
  std::shared_ptr<bucket_client> buckets;
  std::vector<float> params;
  std::vector<float> grad;            // the gradient being pushed
  std::vector<float> batch_grad;      // one batch's gradient, averaged into grad when accumulating
  std::vector<float> residual;        // sign compression: what earlier pushes have not yet sent
  std::optional<round_state> rounds;  // --mode diloco: a chunk is a round of local steps
  std::vector<table_spec> tables;     // the task's embedding tables (none for dense models)
  sparse_rows_view rows;              // the rows of the chunk at the front of the queue
  std::deque<work_chunk> queue;       // claimed, not yet computed (< claim_below + lease_chunks)
  work_chunk current;                 // the chunk whose gradient is being pushed
  double current_loss = 0;            // its summed batch losses
  bool current_skipped = false;       // its loss or gradient was not finite: nothing pushed
  throttled_warning skip_warning;     // says skipped chunks at the first, then once a minute
  bool current_reported = true;       // it is among the finished (or no chunk is being pushed)
  // The chunks this worker finished that its coordinator's standby may not know of yet, with
  // their summed losses and the worker's clock after each: a coordinator that took over from
  // one that died learns from them what was done (rejoin). Kept only with a standby listed,
  // and only until the coordinator says its standby holds them (held_through): kept whole, a
  // long job would grow them for good (32 bytes a chunk, about 1 MiB a minute at fmnist's pace).
  struct reported_chunk {
    work_chunk chunk;
    double loss = 0;
    uint64_t clock = 0;
  };
  std::deque<reported_chunk> reported;
  uint64_t finished_steps = 0;  // batches of every chunk it finished
  // Finished chunks whose progress is not sent yet (report_every, report_within).
  std::vector<progress> unreported;
  std::chrono::steady_clock::time_point unreported_since;  // when the oldest of them finished
  // What waits for the coordinator to be back (a standby taking over): run once rejoined.
  std::vector<std::function<void()>> after_rejoin;
  double chunk_staleness = 0;  // summed staleness of its pushes' acks so far
  uint32_t chunk_acks = 0;
  bool claim_pending = false;  // a claim request is in flight
  bool rejoining = false;      // registering with a standby that takes over
  bool exhausted = false;      // the coordinator has no work left for us
  bool finished = false;       // done has been sent
  uint64_t clock = 0;          // pushes done: the worker's logical clock
  size_t pulls_pending = 0;    // pull replies still due
  size_t pushes_pending = 0;   // push acks still due
  bool have_params = false;    // a pull round completed since the last computation
  double compute_s = 0;        // time spent in gradient() (and the straggler delay)
  std::chrono::steady_clock::time_point started;
  bool stopping = false;
  bool paused = false;  // no new chunk starts (checkpoint)
  // Pauses (a checkpoint, a drain) answered once no push is in flight.
  std::vector<caf::typed_response_promise<bool>> pauses;
  worker_metrics metrics;  // this worker's series (null without a registry)
};

worker_actor::behavior_type worker(worker_actor::stateful_pointer<worker_state> self,
                                   worker_config config);

}  // namespace troupe
