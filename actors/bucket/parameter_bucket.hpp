// parameter_bucket: the actor that owns one bucket_store. Pushes are decoded, validated and
// applied in arrival order (one at a time, so no locks); undecodable or mismatched pushes get
// an errc error and count as rejected. Pulls that ssp/bsp must hold back wait here as response
// promises (at most one per worker) and are answered as soon as the clocks allow.
//
// Replication (primary-backup): a primary with a backup forwards every push, granted pull,
// retire and admit to it in order, and acknowledges a push only once the backup has applied
// it, so an acknowledged update survives the loss of either copy. A primary whose backup
// fails holds its acknowledgements until the coordinator drops that backup or names a new one
// (never on its own: cut off from the coordinator, it may be replaced by that very backup).
// The store lives in a
// shared_ptr held by the node's supervisor too, so a restarted bucket keeps its state.
// With a DASH device, the DASH steps a push (or a round) makes are stepped on the GPU before
// the push is forwarded and acknowledged, each awaited, so that nothing reads half-stepped
// parameters; any device failure steps them on the CPU instead (the same result up to fp32
// rounding), and so do the next 100 applied pushes before the device is tried again. With
// --export-dir, a primary with tables writes its changed rows every --export-every seconds and
// once more when it ends (row_export.hpp); the writes block the bucket while they run. Spawned by a
// server's supervisor; `controller` (the coordinator) may retire and admit
// workers, save and restore state, set backups, promote, and inject faults.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/bucket/bucket_store.hpp"
#include "actors/bucket/dash_device.hpp"
#include "actors/bucket/row_export.hpp"
#include "actors/supervision/failure/coordinator_link.hpp"
#include "actors/supervision/node_metrics.hpp"
#include "messages/protocol.hpp"
#include "troupe/log.hpp"

namespace troupe {

// How a pull's reply is made: handed over as it is (to an actor of this process), encoded, or
// unwritten (to a data lane, which copies the slices once, straight into its ring).
enum class reply_form { local, encoded, unwritten };

struct held_pull {
  caf::typed_response_promise<wire> promise;
  pull_request request;
  reply_form form = reply_form::encoded;  // as the request asked
};

// A push acknowledgement that waits for the backup to have the push too.
struct awaiting_backup {
  caf::typed_response_promise<wire> promise;
  caf::expected<wire> reply;  // what this bucket answers: the ack, or why it refused
};

struct bucket_actor_state {
  static inline const char* name = "troupe.bucket";
  std::shared_ptr<bucket_store> store;
  codec_limits limits;
  std::vector<held_pull> held;
  std::optional<bucket_actor> backup;  // a primary's backup (monitored)
  bool holding = false;  // its backup failed: acknowledgements wait for the coordinator
  std::map<uint64_t, awaiting_backup> awaiting;  // forwarded pushes by sequence number
  uint64_t forwarded = 0;
  caf::actor_addr primary;         // a backup's primary (the sender of its state)
  caf::actor_addr former_primary;  // after a promotion: pushes from it are refused
  bool deposed = false;            // its backup was promoted in its place: it serves nobody
  std::vector<wire> incoming;      // state parts received so far (restore)
  std::vector<wire> saved;         // state parts being handed out (save)
  bucket_metrics metrics;          // this bucket's series (null without a registry)
  uint64_t device_failures = 0;    // DASH steps the device failed (then stepped on the CPU)
  uint32_t device_backoff = 0;     // pushes left that step on the CPU after a failure
  uint32_t told_cpu_slices = 0;    // times it warned of DASH slices the GPU cannot step
  std::shared_ptr<row_exporter> exporter;  // --export-dir with tables (shared with the exit hook)
};

struct bucket_actor_config {
  caf::actor_addr supervisor;       // the only one whose exit messages count
  coordinator_link_ptr controller;  // the coordinator
  std::chrono::seconds request_timeout{30};
  logger log;
  std::shared_ptr<metrics_registry> metrics;  // the node's; none: no metrics
  // --dash-device gpu: DASH steps go to this device (the CPU steps them when it fails).
  std::optional<dash_device_actor> dash_device;
};

bucket_actor::behavior_type parameter_bucket(
    bucket_actor::stateful_pointer<bucket_actor_state> self, std::shared_ptr<bucket_store> store,
    bucket_actor_config config);

}  // namespace troupe
