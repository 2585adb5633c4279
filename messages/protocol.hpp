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
CAF_ADD_ATOM(troupe, troupe, fault_atom, "fault")
CAF_ADD_ATOM(troupe, troupe, save_atom, "save")
CAF_ADD_ATOM(troupe, troupe, restore_atom, "restore")
CAF_ADD_ATOM(troupe, troupe, pieces_atom, "pieces")
CAF_ADD_ATOM(troupe, troupe, backup_atom, "backup")
CAF_ADD_ATOM(troupe, troupe, promote_atom, "promote")
CAF_ADD_ATOM(troupe, troupe, mirror_atom, "mirror")
CAF_ADD_ATOM(troupe, troupe, moved_atom, "moved")
CAF_ADD_ATOM(troupe, troupe, escalate_atom, "escalate")
CAF_ADD_ATOM(troupe, troupe, pause_atom, "pause")
CAF_ADD_ATOM(troupe, troupe, resume_atom, "resume")
CAF_ADD_ATOM(troupe, troupe, peer_atom, "peer")
CAF_ADD_ATOM(troupe, troupe, inspect_atom, "inspect")
CAF_ADD_ATOM(troupe, troupe, metrics_atom, "metrics")
CAF_ADD_ATOM(troupe, troupe, usage_atom, "usage")
CAF_ADD_ATOM(troupe, troupe, log_atom, "log")
CAF_ADD_ATOM(troupe, troupe, drain_atom, "drain")
CAF_ADD_ATOM(troupe, troupe, checkpoint_atom, "checkpoint")
CAF_ADD_ATOM(troupe, troupe, nonce_atom, "nonce")
CAF_ADD_ATOM(troupe, troupe, primary_atom, "primary")
CAF_ADD_ATOM(troupe, troupe, operate_atom, "operate")
CAF_ADD_ATOM(troupe, troupe, alloc_atom, "alloc")
CAF_ADD_ATOM(troupe, troupe, release_atom, "release")
CAF_ADD_ATOM(troupe, troupe, upload_atom, "upload")
CAF_ADD_ATOM(troupe, troupe, download_atom, "download")
CAF_ADD_ATOM(troupe, troupe, run_atom, "run")
CAF_ADD_ATOM(troupe, troupe, event_atom, "event")
CAF_ADD_ATOM(troupe, troupe, step_atom, "step")
CAF_ADD_ATOM(troupe, troupe, put_atom, "put")
CAF_ADD_ATOM(troupe, troupe, service_atom, "service")
CAF_ADD_ATOM(troupe, troupe, get_atom, "get")
CAF_ADD_ATOM(troupe, troupe, form_atom, "form")
CAF_ADD_ATOM(troupe, troupe, reduce_atom, "reduce")
CAF_ADD_ATOM(troupe, troupe, sync_atom, "sync")
CAF_ADD_ATOM(troupe, troupe, broken_atom, "broken")
CAF_ADD_ATOM(troupe, troupe, chunk_atom, "chunk")
CAF_ADD_ATOM(troupe, troupe, tables_atom, "tables")
CAF_ADD_ATOM(troupe, troupe, follow_atom, "follow")
CAF_ADD_ATOM(troupe, troupe, state_atom, "state")
CAF_ADD_ATOM(troupe, troupe, rejoin_atom, "rejoin")
CAF_ADD_ATOM(troupe, troupe, takeover_atom, "takeover")
CAF_ADD_ATOM(troupe, troupe, group_atom, "group")

namespace troupe {

// One message signature per line reads best:
// clang-format off

// A parameter bucket owns slices of the model's tensors and their optimizer state.
//   pull:   pull_request -> pull_reply (held back while ssp/bsp clocks do not allow it)
//   push:   push_request -> push_ack, or an errc error (counted as rejected)
//   stats:  -> bucket_stats
//   retire: worker rank; a lost worker no longer holds back ssp/bsp (coordinator only)
//   admit:  a late (or resumed) worker's rank -> the clock it starts at (coordinator only)
// Fault tolerance (from the coordinator, or a backup's primary where noted):
//   fault:   crash on purpose (fault injection): the bucket ends with errc::injected_fault
//   save:    part index -> (that part of the saved state, number of parts); index 0 saves anew
//   restore: part index, number of parts, part -> true once the last part is in (or primary)
//   backup:  a bucket to keep as backup -> true once it holds this bucket's state; from then
//            on every push is acknowledged only after the backup has it. An invalid handle
//            drops the backup (its server was lost: requests to it would only time out)
//   promote: -> true; a backup becomes a primary
//   mirror:  pull_request; a backup records what its primary let a worker read (primary only)
//   primary: -> true; the primary whose state this backup is to take (restore, mirror, pushes):
//            coordinator only, sent before that primary is told of its backup
//   tick:    from the bucket itself, every --export-every seconds: a primary writes the next
//            file of its tables' changed rows (troupe/table_deltas.hpp)
using bucket_actor = caf::typed_actor<caf::replies_to<pull_atom, wire>::with<wire>,
                                      caf::replies_to<push_atom, wire>::with<wire>,
                                      caf::replies_to<stats_atom>::with<wire>,
                                      caf::reacts_to<retire_atom, uint32_t>,
                                      caf::replies_to<admit_atom, uint32_t>::with<uint64_t>,
                                      caf::reacts_to<fault_atom>,
                                      caf::replies_to<save_atom, uint32_t>::with<wire, uint32_t>,
                                      caf::replies_to<restore_atom, uint32_t, uint32_t, wire>::with<bool>,
                                      caf::replies_to<backup_atom, caf::actor>::with<bool>,
                                      caf::replies_to<promote_atom>::with<bool>,
                                      caf::reacts_to<mirror_atom, wire>,
                                      caf::replies_to<primary_atom, caf::actor>::with<bool>,
                                      caf::reacts_to<tick_atom>>;

// The host of a server node: its supervisor spawns and restarts the buckets placed on it.
//   host:  bucket_spec -> the new bucket
//   stop:  why the job failed ("" when it finished) -> true, then the server quits
//   moved: internal, from the node's supervisor: a restarted child's name and new handle
//   fault: crash on purpose (fault injection, coordinator only)
//   peer:  another server's host and port -> true once connected directly (primaries then
//          reach their backups in one hop; coordinator only, before any bucket is placed)
//   metrics: -> this node's metrics in the Prometheus text format (coordinator only)
//   log:   a log level ("error", "warn", "info", "debug") for the whole node (coordinator only)
//   usage: -> the most resident memory its process has held, in bytes (the job's report)
//   rejoin: from this process's coordinator watch: a standby took over as the coordinator of
//          this term; register with it again (term 0: no coordinator is left, stop)
using server_actor = caf::typed_actor<caf::replies_to<host_atom, wire>::with<bucket_actor>,
                                      caf::reacts_to<rejoin_atom, uint64_t>,
                                      caf::replies_to<stop_atom, std::string>::with<bool>,
                                      caf::replies_to<peer_atom, std::string, uint16_t>::with<bool>,
                                      caf::reacts_to<moved_atom, std::string, caf::actor>,
                                      caf::reacts_to<fault_atom>,
                                      caf::replies_to<metrics_atom>::with<std::string>,
                                      caf::reacts_to<log_atom, std::string>,
                                      caf::replies_to<usage_atom>::with<uint64_t>>;

// A worker: once started, claims chunks of batches from the coordinator (claim, several at a
// time), pulls, computes and pushes each chunk, and reports finished chunks (progress, in
// batches).
//   start:  start_job and one handle per bucket, in placement order
//   stop:   as for servers
//   pause:  -> true once no push is in flight; no new chunk starts until resume (checkpoints)
//   resume: go on after a pause
//   state:  the coordinator's standby holds this worker's chunks through this clock: a rejoin
//           needs none of them
//   fault, metrics, log, usage, rejoin: as for servers
using worker_actor = caf::typed_actor<caf::reacts_to<start_atom, wire, std::vector<bucket_actor>>,
                                      caf::reacts_to<rejoin_atom, uint64_t>,
                                      caf::reacts_to<state_atom, uint64_t>,
                                      caf::replies_to<stop_atom, std::string>::with<bool>,
                                      caf::replies_to<pause_atom>::with<bool>,
                                      caf::reacts_to<resume_atom>,
                                      caf::reacts_to<fault_atom>,
                                      caf::replies_to<metrics_atom>::with<std::string>,
                                      caf::reacts_to<log_atom, std::string>,
                                      caf::replies_to<usage_atom>::with<uint64_t>>;

// A standby coordinator (actors/job/standby.hpp): it follows its primary's state.
//   state: the primary's term and its coordinator_standing -> true; errc::deposed once this
//          standby has taken over (the sender, a deposed primary, must stop)
//   stop:  from the primary: the job is over ("" or why it failed); the standby quits
//   tick:  internal, the check on the primary's silence
//   takeover: from its parent, why: take over now (--mode hybrid: the other coordinator of the
//          primary's process was judged lost, and the two go together)
using standby_actor = caf::typed_actor<caf::replies_to<state_atom, uint64_t, wire>::with<bool>,
                                       caf::reacts_to<stop_atom, std::string>,
                                       caf::reacts_to<tick_atom>,
                                       caf::reacts_to<takeover_atom, std::string>>;

// The coordinator: membership, placement, the work, evaluation, the report.
//   join:     join_request and the member's handle -> join_reply
//   claim:    a worker's rank and the most chunks it wants -> a work_lease of at least one
//             chunk and at most that many (none: no work left)
//   progress: progress_batch (a worker finished these chunks)
//   done:     the rank of a worker that has no work left
//   heartbeat: heartbeat (a node is alive) -> the coordinator's term; tick: internal, the
//             heartbeat check
//   follow:   a standby coordinator -> this coordinator's term; the standby gets its state
//             from now on (one standby at a time)
//   rejoin:   after a takeover: rejoin_request and the member's handle (a server's buckets
//             beside it, in the request's order) -> join_reply with the new term
//   which:    bucket id, the handle that failed -> the bucket's current primary (held until
//             it differs from the failed one: after a restart or a promotion)
//   moved:    bucket id, its new handle (a server's supervisor restarted it)
//   backup:   bucket id, a copy of it, the copy after it in its chain, which failed (the
//             reporter holds its acknowledgements until the coordinator takes the failed one
//             out of the chain and links the reporter onwards; only from the reporter)
//   escalate: a server's supervisor gave up (why); its buckets are lost with the server
//   fault:    an actor's name ("bucket-3", a worker's or a server's name) -> what was done
//   inspect:  a view ("nodes", "tree", "workers", "buckets", "metrics", "diag", "curve")
//             -> table_view (the console's)
//   checkpoint: take a checkpoint now -> its path (needs --checkpoint-dir)
//   drain:    a node's name -> what was done: a worker finishes its push in flight and leaves
//             (its unfinished batches go to the others); a server's buckets move to the other
//             servers first (a copy is made where there is none), then it stops
//   log:      a log level, and a node's name or "" for every node -> what was done
//   service:  a parameter service's name -> its service_directory, its supervisor and its
//             buckets (an app_node that serves it; a training job's coordinator serves none)
//   tables:   --mode hybrid, from the group's coordinator: the buckets of the task's tables,
//             once placed (held until then), and the servers' HOST:PORT list (members connect
//             to them directly: table traffic must not depend on a coordinator's node)
//   stop:     --mode hybrid, from the group's coordinator: the job is over ("" or why it
//             failed); stop the servers and quit
using coordinator_actor =
    caf::typed_actor<caf::replies_to<join_atom, wire, server_actor>::with<wire>,
                     caf::replies_to<join_atom, wire, worker_actor>::with<wire>,
                     caf::replies_to<claim_atom, uint32_t, uint32_t>::with<wire>,
                     caf::reacts_to<progress_atom, wire>,
                     caf::reacts_to<done_atom, uint32_t>,
                     caf::replies_to<heartbeat_atom, wire>::with<uint64_t>,
                     caf::reacts_to<tick_atom>,
                     caf::replies_to<follow_atom, standby_actor>::with<uint64_t>,
                     caf::replies_to<rejoin_atom, wire, server_actor, std::vector<bucket_actor>>::with<wire>,
                     caf::replies_to<rejoin_atom, wire, worker_actor>::with<wire>,
                     caf::replies_to<which_atom, uint32_t, bucket_actor>::with<bucket_actor>,
                     caf::reacts_to<moved_atom, uint32_t, bucket_actor>,
                     caf::reacts_to<backup_atom, uint32_t, bucket_actor, bucket_actor>,
                     caf::reacts_to<escalate_atom, std::string>,
                     caf::replies_to<inspect_atom, std::string>::with<wire>,
                     caf::replies_to<nonce_atom>::with<std::string>,
                     caf::replies_to<operate_atom, wire>::with<std::string>,
                     caf::replies_to<service_atom, std::string>::with<wire, caf::actor,
                                                                      std::vector<bucket_actor>>,
                     caf::replies_to<tables_atom>::with<std::vector<bucket_actor>, std::string>,
                     caf::replies_to<group_atom, std::string>::with<caf::actor>,
                     caf::reacts_to<stop_atom, std::string>>;

// The only actor a node publishes: it hands out the coordinator to peers that prove they know
// the cluster secret (runtime/include/troupe/auth.hpp).
//   hello: hello -> challenge
//   prove: proof -> the coordinator
using gatekeeper_actor =
    caf::typed_actor<caf::replies_to<hello_atom, wire>::with<wire>,
                     caf::replies_to<prove_atom, wire>::with<coordinator_actor>>;

// --mode dp. A data-parallel worker (actors/dp/trainer/dp_trainer.hpp): a full replica of the model.
//   start: group_start; forms that generation of the group (after the step in flight), agrees
//          with the other members on one state, and trains from there
//   stop:  as for servers (a member declared lost is stopped with the reason)
//   run:   internal, the next step
//   tick:  internal, the bound on waiting for a new generation after a collective failed
//   restore: step, part index, part count, part: a checkpoint's state (bucket_store::save),
//          sent before a start; the member goes on from it (and the others from the member)
//   pieces: step, part index, part count, part: with --zero-stage 1 or 2, the checkpoint's
//          sharded optimizer state, after the restore and before the start: part 0 is the
//          group_start that will follow (whose cut the member fills), then the piece records
//   tables: --mode hybrid: the buckets that hold the task's embedding tables and the servers'
//          HOST:PORT list (the member connects to them directly), before a start
//   rejoin: from this process's coordinator watch: the coordinator of that term took over
//          (0: none did); the member rejoins it and sends again what it holds
//   state:  step, epochs: the coordinator's standby holds this member's step reports through
//          that step and the evaluations of that many epochs; the member stops holding them
//   save:   the console's `checkpoint`: member 0 sends its state after its next step
//   log:    a log level for its node (the console's `log`)
//   usage:  as for servers
using dp_worker_actor = caf::typed_actor<caf::reacts_to<start_atom, wire>,
                                         caf::reacts_to<tables_atom, std::vector<bucket_actor>, std::string>,
                                         caf::replies_to<restore_atom, uint64_t, uint32_t, uint32_t, wire>::with<bool>,
                                         caf::replies_to<pieces_atom, uint64_t, uint32_t, uint32_t, wire>::with<bool>,
                                         caf::replies_to<stop_atom, std::string>::with<bool>,
                                         caf::reacts_to<run_atom>,
                                         caf::reacts_to<tick_atom, uint64_t>,
                                         caf::reacts_to<rejoin_atom, uint64_t>,
                                         caf::reacts_to<state_atom, uint64_t, uint32_t>,
                                         caf::reacts_to<save_atom>,
                                         caf::reacts_to<log_atom, std::string>,
                                         caf::replies_to<usage_atom>::with<uint64_t>>;

// The coordinator of a data-parallel job (actors/dp/plan/dp_plan.hpp). The gatekeeper hands it
// out as a coordinator_actor handle (heartbeat has the same signature in both); dp workers
// cast it back.
//   join:      join_request and the worker's handle -> join_reply
//   heartbeat: as above; tick: internal, the heartbeat check
//   step:      step_report (a member finished a step)
//   eval:      epoch, part, pull_reply with that part's slices: a member's parameters after the
//              epoch, in the parts of message_parts (detail/layout.hpp)
//   done:      the rank of a member that has trained every step
//   put:       store_entry -> true (a member sets a rendezvous key)
//   get:       store_entry with no value -> the entry, held until the key is set
//   broken:    generation, why: a member's collective failed; unless a loss explains it
//              first, the live members form a new generation after --heartbeat-timeout-ms
//   tick(gen): internal, that check
//   save:      step, part index, part count, part: member 0's state after that step, for a
//              checkpoint (--checkpoint-dir); with --zero-stage 1 or 2 its parameters alone
//   pieces:    step, part index, part count, part: with --zero-stage 1 or 2, a member's own
//              pieces of the optimizer's state after that step (piece records), for the same
//              checkpoint; every member sends its own at once
//   inspect:   a view ("group", "tree", "nodes", "metrics") -> table_view (the console's; the
//              same signature as the parameter service coordinator's)
//   which:     --mode hybrid: a member's table bucket failed -> where it is now
//   follow:    as above (--mode dp and hybrid)
//   rejoin:    after a takeover: rejoin_request and the worker's handle -> join_reply with the
//              new term (held until every member is back or the takeover's deadline passes)
using dp_coordinator_actor =
    caf::typed_actor<caf::replies_to<join_atom, wire, dp_worker_actor>::with<wire>,
                     caf::replies_to<heartbeat_atom, wire>::with<uint64_t>,
                     caf::reacts_to<tick_atom>,
                     caf::reacts_to<step_atom, wire>,
                     caf::replies_to<eval_atom, uint32_t, uint32_t, wire>::with<bool>,
                     caf::reacts_to<done_atom, uint32_t>,
                     caf::replies_to<put_atom, wire>::with<bool>,
                     caf::replies_to<get_atom, wire>::with<wire>,
                     caf::reacts_to<broken_atom, uint64_t, std::string>,
                     caf::replies_to<save_atom, uint64_t, uint32_t, uint32_t, wire>::with<bool>,
                     caf::replies_to<pieces_atom, uint64_t, uint32_t, uint32_t, wire>::with<bool>,
                     caf::replies_to<inspect_atom, std::string>::with<wire>,
                     caf::reacts_to<tick_atom, uint64_t>,
                     caf::replies_to<which_atom, uint32_t, bucket_actor>::with<bucket_actor>,
                     caf::replies_to<follow_atom, standby_actor>::with<uint64_t>,
                     caf::replies_to<rejoin_atom, wire, dp_worker_actor>::with<wire>>;

// A job's coordinator (actors/coordinator): the job shell with the plans of its mode, one
// actor for --mode ps, dp and hybrid. Its members see the part they use: servers, workers and
// the console a coordinator_actor, dp members a dp_coordinator_actor (the same actor, cast).
using job_actor = coordinator_actor::extend<
    caf::replies_to<join_atom, wire, dp_worker_actor>::with<wire>,
    caf::reacts_to<step_atom, wire>,
    caf::replies_to<eval_atom, uint32_t, uint32_t, wire>::with<bool>,
    caf::replies_to<put_atom, wire>::with<bool>,
    caf::replies_to<get_atom, wire>::with<wire>,
    caf::reacts_to<broken_atom, uint64_t, std::string>,
    caf::replies_to<save_atom, uint64_t, uint32_t, uint32_t, wire>::with<bool>,
    caf::replies_to<pieces_atom, uint64_t, uint32_t, uint32_t, wire>::with<bool>,
    caf::reacts_to<tick_atom, uint64_t>,
    caf::replies_to<rejoin_atom, wire, dp_worker_actor>::with<wire>>;

// A member of a loop group (actors/dp/loops/loop_group.hpp): a process whose own training loop
// reduces its gradients in the group (troupe.DistributedOptimizer).
//   start: group_start (rank, size, generation, token, collective, timeout, group key,
//          hosts): form that generation
//   stop:  the group ended, or refused this member (the reason)
//   run:   internal, the jobs its process queued (actors/dp/loop_member.hpp)
using loop_member_actor =
    caf::typed_actor<caf::reacts_to<start_atom, wire>,
                     caf::replies_to<stop_atom, std::string>::with<bool>,
                     caf::reacts_to<run_atom>>;

// The coordinator of a loop group, served by an app node (app_node::serve_group; a node hands
// it out to those who proved the secret, through coordinator_actor's group(name)).
//   join:    join_request and the member -> join_reply; a generation forms once enough joined
//   put/get: the generation's rendezvous store (store_entry, as the dp coordinator's)
//   broken:  generation, why: a member's collective failed; the live members form a new one
//   done:    the member of that token leaves (its loop ended)
//   tick:    internal, a broken generation's wait for a loss to explain it
using loop_group_actor =
    caf::typed_actor<caf::replies_to<join_atom, wire, loop_member_actor>::with<wire>,
                     caf::replies_to<put_atom, wire>::with<bool>,
                     caf::replies_to<get_atom, wire>::with<wire>,
                     caf::reacts_to<broken_atom, uint64_t, std::string>,
                     caf::reacts_to<done_atom, uint64_t>,
                     caf::reacts_to<tick_atom, uint64_t>>;

// What a group's rendezvous store is to its members: the dp coordinator's, or a loop group's.
using rendezvous_actor = caf::typed_actor<caf::replies_to<put_atom, wire>::with<bool>,
                                          caf::replies_to<get_atom, wire>::with<wire>>;

// clang-format on

}  // namespace troupe

// Types get their ids after the aliases above.
CAF_ADD_TYPE_ID(troupe, (troupe::wire))
CAF_ADD_TYPE_ID(troupe, (troupe::bucket_actor))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::bucket_actor>))
CAF_ADD_TYPE_ID(troupe, (troupe::server_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::worker_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::standby_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::coordinator_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::gatekeeper_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::dp_worker_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::dp_coordinator_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::loop_member_actor))
CAF_ADD_TYPE_ID(troupe, (troupe::loop_group_actor))
CAF_END_TYPE_ID_BLOCK(troupe)

namespace troupe {

// Registers every type above and the "troupe" error category with a CAF configuration.
void register_protocol(caf::actor_system_config& cfg);

}  // namespace troupe
