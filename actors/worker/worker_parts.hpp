// The worker actor's functions shared between its source files: worker.cpp (its loop: claims,
// computation, progress, start and rejoin) and worker_requests.cpp (its pushes and pulls,
// through its bucket_client). Internal to the worker: nothing else may call them.
#pragma once

#include <memory>
#include <string>

#include "actors/worker/worker.hpp"

namespace troupe::worker_detail {

using self_ptr = worker_actor::stateful_pointer<worker_state>;

// -- worker.cpp
// Fails with what we were doing in front of the reason, e.g. "pushing to bucket 3: ...".
void fail(self_ptr self, const worker_config& config, const std::string& doing,
          const caf::error& err);
// Once every bucket acknowledged a push: the clock advances and the chunk is finished.
void pushed(self_ptr self, const worker_config& config);
// Writes on the process's activity board (the stall report) that the worker, at `chunk`, now
// waits on `waiting_on`.
void record_activity(self_ptr self, const worker_config& config, const work_chunk& chunk,
                     const char* waiting_on);
// Moves the loop on: says done when no work is left, pulls when values are missing, and
// computes and pushes the next chunk once its values are in and no push is in flight.
void maybe_compute(self_ptr self, const worker_config& config);

// -- worker_requests.cpp
// The client of the job's buckets `buckets`, with a data lane to each of `servers` that has one
// (connect_servers); it monitors them, and finds one gone again through the coordinator.
std::shared_ptr<bucket_client> connect_buckets(self_ptr self, const worker_config& config,
                                               std::vector<bucket_actor> buckets,
                                               const std::vector<endpoint>& servers);
// Pushes the chunk's gradient to every bucket (`skipped`: the step only, no tensors), each with
// the pull of the values after it where the worker pulls at once: as one pair of frames where
// no bucket holds a pull (bucket_client::push_then_pull).
void push_round(self_ptr self, const worker_config& config, bool skipped);
// --mode diloco: readies a round's pushes (each bucket's ack, and the pull behind it, due), then
// pushes fragment k's pseudo-gradient once its sync step is done (local_rounds.hpp).
void begin_pushes(self_ptr self, const worker_config& config);
void push_fragment(self_ptr self, const worker_config& config, uint32_t k);
// Pulls every bucket's values and, for models with embedding tables, the rows the chunk at the
// front of the queue reads. `ahead`: 1 for a pull of the values after this worker's push of
// the current chunk.
void pull_round(self_ptr self, const worker_config& config, uint64_t ahead = 0);

}  // namespace troupe::worker_detail
