// The actor protocol of Troupe: the typed interface of every actor that can be reached from
// another process, the atoms that name their messages, and the one CAF type-id block that
// registers every type crossing the network. Message contents travel as `wire` (Cap'n Proto
// bytes, see codec.hpp); the comment beside each message names the struct it carries.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

#include "messages/codec.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)
CAF_ADD_ATOM(troupe, troupe, pull_atom, "pull")
CAF_ADD_ATOM(troupe, troupe, push_atom, "push")
CAF_ADD_ATOM(troupe, troupe, stats_atom, "stats")
CAF_ADD_ATOM(troupe, troupe, host_atom, "host")
CAF_ADD_ATOM(troupe, troupe, start_atom, "start")
CAF_ADD_ATOM(troupe, troupe, stop_atom, "stop")
CAF_ADD_ATOM(troupe, troupe, join_atom, "join")
CAF_ADD_ATOM(troupe, troupe, claim_atom, "claim")
CAF_ADD_ATOM(troupe, troupe, progress_atom, "progress")
CAF_ADD_ATOM(troupe, troupe, done_atom, "done")
CAF_ADD_ATOM(troupe, troupe, hello_atom, "hello")
CAF_ADD_ATOM(troupe, troupe, prove_atom, "prove")
CAF_ADD_ATOM(troupe, troupe, eval_atom, "eval")
CAF_ADD_ATOM(troupe, troupe, retire_atom, "retire")
CAF_ADD_ATOM(troupe, troupe, admit_atom, "admit")
CAF_ADD_ATOM(troupe, troupe, which_atom, "which")
CAF_ADD_ATOM(troupe, troupe, restart_atom, "restart")
CAF_ADD_ATOM(troupe, troupe, heartbeat_atom, "heartbeat")
CAF_ADD_ATOM(troupe, troupe, tick_atom, "tick")

namespace troupe {

// One message signature per line reads best:
// clang-format off

// A parameter bucket owns slices of the model's tensors and their optimizer state.
//   pull:   pull_request -> pull_reply (held back while ssp/bsp clocks do not allow it)
//   push:   push_request -> push_ack, or an errc error (counted as rejected)
//   stats:  -> bucket_stats
//   retire: worker rank; a lost worker no longer holds back ssp/bsp (coordinator only)
//   admit:  a late worker's rank -> the clock it starts at (coordinator only)
using bucket_actor = caf::typed_actor<caf::replies_to<pull_atom, wire>::with<wire>,
                                      caf::replies_to<push_atom, wire>::with<wire>,
                                      caf::replies_to<stats_atom>::with<wire>,
                                      caf::reacts_to<retire_atom, uint32_t>,
                                      caf::replies_to<admit_atom, uint32_t>::with<uint64_t>>;

// The host of a server node: spawns and owns the buckets the coordinator places on it.
//   host: bucket_spec -> the new bucket
//   stop: why the job failed ("" when it finished) -> true, then the server quits
using server_actor = caf::typed_actor<caf::replies_to<host_atom, wire>::with<bucket_actor>,
                                      caf::replies_to<stop_atom, std::string>::with<bool>>;

// A worker: trains on its shard once started, reporting each epoch to the coordinator.
//   start: start_job and one handle per bucket, in placement order
//   stop:  as for servers
using worker_actor = caf::typed_actor<caf::reacts_to<start_atom, wire, std::vector<bucket_actor>>,
                                      caf::replies_to<stop_atom, std::string>::with<bool>>;

// The coordinator: membership, placement, the work, evaluation, the report.
//   join:     join_request and the member's handle -> join_reply
//   claim:    a worker's rank -> the next work_chunk for it (count 0: no work left)
//   progress: progress (a worker finished a chunk)
//   done:     the rank of a worker that has no work left
//   heartbeat: heartbeat (a node is alive); tick: internal, the heartbeat check
using coordinator_actor =
    caf::typed_actor<caf::replies_to<join_atom, wire, server_actor>::with<wire>,
                     caf::replies_to<join_atom, wire, worker_actor>::with<wire>,
                     caf::replies_to<claim_atom, uint32_t>::with<wire>,
                     caf::reacts_to<progress_atom, wire>,
                     caf::reacts_to<done_atom, uint32_t>,
                     caf::reacts_to<heartbeat_atom, wire>,
                     caf::reacts_to<tick_atom>>;

// The only actor a node publishes: it hands out the coordinator to peers that prove they know
// the cluster secret (runtime/include/troupe/auth.hpp).
//   hello: hello -> challenge
//   prove: proof -> the coordinator
using gatekeeper_actor =
    caf::typed_actor<caf::replies_to<hello_atom, wire>::with<wire>,
                     caf::replies_to<prove_atom, wire>::with<coordinator_actor>>;

// clang-format on

}  // namespace troupe

// Types get their ids after the aliases above.
CAF_ADD_TYPE_ID(troupe, (troupe::wire))
CAF_ADD_TYPE_ID(troupe, (troupe::bucket_actor))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::bucket_actor>))
CAF_ADD_TYPE_ID(troupe, (troupe::server_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::worker_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::coordinator_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::gatekeeper_actor))
CAF_END_TYPE_ID_BLOCK(troupe)

namespace troupe {

// Registers every type above and the "troupe" error category with a CAF configuration.
void register_protocol(caf::actor_system_config& cfg);

}  // namespace troupe
