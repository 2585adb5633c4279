# Everything that crosses a process boundary in Troupe. Tensors travel only inside these
# messages, as raw little-endian bytes (CAF 0.17 moves byte vectors ~30x faster than float
# vectors and corrupts NaN/Inf in the latter). The codec (codec.hpp) validates every field on
# decode; never read these structs directly from untrusted bytes.
@0xf1bfe5478274a336;

$import "/capnp/c++.capnp".namespace("troupe::schema");

# -- tensors ------------------------------------------------------------------------------------

enum DType {
  f32 @0;
  bf16 @1;   # storage only: widened to fp32 on decode
  f16 @2;    # storage only: widened to fp32 on decode
  i8 @3;     # storage only: a fp32 scale per block of 256 values, then a byte per value
}

# A dense tensor, or a row range of one (rowOffset > 0 when it is a slice of a larger matrix).
struct DenseTensor {
  name @0 :Text;
  shape @1 :List(UInt32);   # shape of these values; numel = product (1 for a scalar)
  rowOffset @2 :UInt32;     # first row of the parent tensor that these values hold
  dtype @3 :DType;
  data @4 :Data;            # numel * sizeof(dtype) bytes, little-endian
}

# Rows of an embedding table keyed by 64-bit ids.
struct SparseRows {
  name @0 :Text;
  rowDim @1 :UInt32;
  ids @2 :List(UInt64);
  dtype @3 :DType;
  data @4 :Data;            # ids.length * rowDim values
}

# 1-bit sign compression: value_i = scale * (bit_i ? +1 : -1).
struct SignTensor {
  name @0 :Text;
  shape @1 :List(UInt32);
  rowOffset @2 :UInt32;
  scale @3 :Float32;
  bits @4 :Data;            # ceil(numel / 8) bytes, bit i of byte i/8 is element i
}

# -- parameter service --------------------------------------------------------------------------

# V[i] = updates from worker i applied to a bucket.
struct VectorClock {
  entries @0 :List(UInt64);
}

struct PullRequest {
  bucket @0 :UInt32;
  worker @1 :UInt32;
  workerClock @2 :UInt64;   # steps the worker has pushed; ssp/bsp hold the reply until allowed
  rows @3 :List(RowRequest);  # embedding rows wanted, per table (ids this bucket owns)
  # Since schema 11, a primary's mirror to its backup only: the rows it evicted before this
  # read, per table, for the backup to evict first.
  evicted @4 :List(RowRequest);
}

struct RowRequest {
  table @0 :Text;
  ids @1 :List(UInt64);
}

struct PullReply {
  bucket @0 :UInt32;
  version @1 :UInt64;       # updates applied so far
  clock @2 :VectorClock;
  tensors @3 :List(DenseTensor);
  rows @4 :List(SparseRows);  # the rows asked for, in the order asked
}

struct PushRequest {
  bucket @0 :UInt32;
  worker @1 :UInt32;
  workerClock @2 :UInt64;   # the worker's logical clock (steps done)
  readClock @3 :VectorClock;# the bucket clock the gradient was computed from
  dense @4 :List(DenseTensor);
  sparse @5 :List(SparseRows);
  signs @6 :List(SignTensor);
  last @7 :Bool;            # the worker's final push: it no longer holds back ssp/bsp peers
  skipped @8 :Bool;         # this step produced nothing to apply (non-finite): count the step
  resend @9 :Bool;          # sent again after a failure: ignored if the bucket already has it
  batches @10 :WorkChunk;   # the work it was computed from (unset: not tracked); schema 5
}

struct PushAck {
  bucket @0 :UInt32;
  version @1 :UInt64;
  staleness @2 :UInt64;     # sum(V_now) - sum(V_read) at apply time
}

# What a server needs to host one bucket: its slices, their initial values, the optimizer.
struct BucketSpec {
  bucket @0 :UInt32;
  workers @1 :UInt32;
  optimizer @2 :Optimizer;
  tensors @3 :List(DenseTensor);
  consistency @4 :Consistency;
  compensation @5 :Compensation;
  tables @6 :List(TableSpec);  # embedding tables: this bucket holds the rows hashed to it
  bucketCount @7 :UInt32;      # how many buckets share the tables' rows
  seed @8 :UInt64;             # rows are initialised from (seed, table, id)
  clip @9 :Float32;            # clip each embedding row's gradient to this L2 norm (0: off)
  syncThreshold @10 :Float32;  # selective sync: a pull sends only rows that moved more (0: off)
  valuesFollow @11 :Bool;      # tensors are shapes only: the values come in saved parts
  # Since schema 11: --export-dir (empty: none), its period and snapshot spacing.
  exportDir @12 :Text;
  exportEverySeconds @13 :UInt32;
  exportSnapshotEvery @14 :UInt32;
}

struct TableSpec {
  name @0 :Text;
  rowDim @1 :UInt32;
  initScale @2 :Float32;
  capacity @3 :UInt64;       # rows the whole table may hold (a soft bound with eviction)
  evict @4 :Evict;           # since schema 11
  ttlSeconds @5 :UInt32;     # evict ttl: rows not read for this long go
  admitAfter @6 :UInt32;     # an id gets a row from its admitAfter-th read on (0 reads as 1)
  enum Evict {
    none @0;
    lru @1;
    lfu @2;
    ttl @3;
  }
}

# How far workers may drift apart: async (no bound), ssp (a worker's clock at most `bound`
# ahead of the slowest), bsp (gradients of a round averaged and applied together).
struct Consistency {
  mode @0 :Mode;
  bound @1 :UInt32;
  enum Mode {
    async @0;
    ssp @1;
    bsp @2;
  }
}

# Delay compensation of a stale gradient g read at theta_read (lambda: its strength).
struct Compensation {
  kind @0 :Kind;
  lambda @1 :Float32;
  enum Kind {
    none @0;
    linear @1;             # g + lambda (theta_now - theta_read)
    dcasgd @2;             # g + lambda g*g*(theta_now - theta_read)
    dcasgdAdaptive @3;     # lambda scaled by 1/sqrt(running mean of g*g)
  }
}

struct Optimizer {
  kind @0 :Kind;
  lr @1 :Float32;
  beta1 @2 :Float32;        # adam; momentum coefficient for sgd
  beta2 @3 :Float32;
  epsilon @4 :Float32;
  weightDecay @5 :Float32;
  lrStaleness @6 :Bool;     # scale the step by 1 / (1 + staleness)
  dashBlock @7 :UInt32;     # dash: block size
  dashFreq @8 :UInt32;      # dash: steps between inverse roots
  # Schema version 1 sent DASH's choices as bytes (0 evd, 1 cn, 2 ndb, 3 cheb; 0 fp32, 1 bf16,
  # 2 fp16; 0 power, 1 frobenius). Version 2 writes the enums below and leaves these 0;
  # checkpoints of version 1 still load through them.
  legacyDashSolver @9 :UInt8;
  legacyDashStorage @10 :UInt8;
  dashNesterov @11 :Bool;   # dash: precondition the look-ahead moment
  legacyDashScaling @12 :UInt8;
  dashSolver @13 :RootSolver;    # dash: how inverse roots are computed
  dashStorage @14 :DashStorage;  # dash: how the statistics are stored (fp32 accumulation)
  dashScaling @15 :RootScaling;  # dash: how matrices are scaled before their roots
  rule @16 :Text;           # kind app: the name of the app's update rule (troupe/update_rule.hpp)
  enum RootSolver {
    evd @0;
    coupledNewton @1;
    newtonDb @2;
    chebyshev @3;
  }
  enum DashStorage {
    fp32 @0;
    bf16 @1;
    fp16 @2;
  }
  enum RootScaling {
    powerIteration @0;
    frobenius @1;
  }
  enum Kind {
    adam @0;                # weight decay as L2 in the gradient
    sgd @1;
    momentum @2;            # heavy ball with coefficient beta1
    adamw @3;               # decoupled weight decay
    dash @4;                # block Shampoo (DASH) with Adam grafting
    app @5;                 # an update rule the app registered, named by `rule`
    nesterov @6;            # DiLoCo's outer optimizer: Nesterov momentum beta1
    delayedNesterov @7;     # Nesterov's momentum on every `delay`-th update only
  }
  delay @17 :UInt32;        # delayedNesterov: updates per momentum step (0 from before: 1)
}

struct BucketStats {
  bucket @0 :UInt32;
  version @1 :UInt64;
  updatesApplied @2 :UInt64;
  updatesRejected @3 :UInt64;
  maxStaleness @4 :UInt64;
  stalenessSum @5 :UInt64;
  clock @6 :VectorClock;
  stalenessHistogram @7 :List(UInt64);  # entry t: pushes applied with staleness t (last: >=)
  maxClockGap @8 :UInt64;   # largest worker clock minus slowest live clock at a granted pull
  updatesSkipped @9 :UInt64;  # pushes with nothing to apply (the worker's gradient was not finite)
  updateVariance @10 :Float64;  # variance / mean^2 of the applied gradients' norms, recent pushes
  duplicatePushes @11 :UInt64;  # pushes of batches already counted here, acknowledged only
  tables @12 :List(TableCounters);  # since schema 11: per embedding table
}

struct TableCounters {
  table @0 :Text;
  rows @1 :UInt64;            # rows held now
  rowsEvicted @2 :UInt64;
  idsNotAdmitted @3 :UInt64;  # reads of ids not admitted yet
  gradsDropped @4 :UInt64;    # row gradients for ids without a row
}

# -- membership ---------------------------------------------------------------------------------

enum Role {
  coordinator @0;
  server @1;
  worker @2;
  console @3;
}

# Step 1 of the join handshake: node -> gatekeeper.
struct Hello {
  role @0 :Role;
  name @1 :Text;
  nodeNonce @2 :Data;       # 32 random bytes
  schemaVersion @3 :UInt32; # messages/codec.hpp's wire_schema_version; 0 from nodes before it
}

# Step 2: gatekeeper -> node. gatekeeperProof = HMAC(secret, "troupe-gatekeeper" | nodeNonce |
# gatekeeperNonce) shows the node that the coordinator knows the secret.
struct Challenge {
  session @0 :UInt64;
  gatekeeperNonce @1 :Data;
  gatekeeperProof @2 :Data;
  schemaVersion @3 :UInt32;  # the gatekeeper's; 0 from gatekeepers before it
}

# Step 3: node -> gatekeeper. nodeProof = HMAC(secret, "troupe-node" | gatekeeperNonce |
# nodeNonce | role | name). The secret itself never travels.
struct Proof {
  session @0 :UInt64;
  nodeProof @1 :Data;
}

# console -> coordinator: an action that changes the job, proven by an operator
# (actors/supervision/operator_gate.hpp).
struct OperatorAction {
  nonce @0 :Text;
  action @1 :List(Text);
  certificate @2 :Data;
  proof @3 :Data;
}

# After the handshake: a node registers its actor with the coordinator.
struct Join {
  role @0 :Role;
  name @1 :Text;
  pid @2 :UInt32;
  dataEndpoint @3 :Endpoint;  # a server's own port, for workers to connect to it directly
  hostLabel @4 :Text;         # --mode dp: which host the worker counts as (two-level reduction)
}

# A host and port; port 0 means none (e.g. in-process actors).
struct Endpoint {
  host @0 :Text;
  port @1 :UInt16;
  lane @2 :UInt16;  # a server's data lane port on the same host; 0: none
}

struct JoinReply {
  rank @0 :UInt32;          # index among nodes of the same role
  worldWorkers @1 :UInt32;
  worldServers @2 :UInt32;
  term @3 :UInt64;          # the coordinator's term: 0 for the first, +1 at each takeover
}

struct Heartbeat {
  name @0 :Text;
  sequence @1 :UInt64;
  sentUnixMs @2 :UInt64;
  cpuSeconds @3 :Float64;   # user + system CPU time of the node's process so far
  rssBytes @4 :UInt64;      # its resident memory
  activity @5 :List(MemberActivity);  # what its members do now (the stall watchdog's report)
  peakRssBytes @6 :UInt64;  # the most resident memory its process has held so far
}

struct MemberActivity {
  member @0 :Text;
  doing @1 :Text;
  waitingOn @2 :Text;
  sinceS @3 :Float64;
}

# Where each bucket lives and how it maps onto the model's tensors.
struct Placement {
  version @0 :UInt64;
  buckets @1 :List(BucketPlacement);
}

struct BucketPlacement {
  bucket @0 :UInt32;
  server @1 :UInt32;        # server rank
  slices @2 :List(Slice);
}

struct Slice {
  tensor @0 :Text;
  rowOffset @1 :UInt32;
  shape @2 :List(UInt32);
}

# -- training progress and the report -----------------------------------------------------------

struct StartJob {
  worker @0 :UInt32;
  workers @1 :UInt32;
  epochs @2 :UInt32;
  batch @3 :UInt32;
  seed @4 :UInt64;
  placement @5 :Placement;
  servers @6 :List(Endpoint);  # data endpoint of each server, by server rank
  accumulate @7 :UInt32;    # batches whose gradients are averaged into one push (>= 1)
  prefetch @8 :Bool;        # pull the next values while the current batch computes
  delayMs @9 :UInt32;       # extra milliseconds per batch (straggler experiments)
  compressSigns @10 :Bool;  # push 1-bit signs with error feedback instead of fp32
  clock @11 :UInt64;        # the worker's starting clock (a late joiner starts at the slowest's)
  workersOnHost @12 :UInt32;  # the job's workers on this worker's host (0: unknown)
  pullsHeld @13 :Bool;      # buckets may hold a pull until the others catch up (ssp, bsp)
  rounds @14 :LocalRounds;  # --mode diloco (absent otherwise)
}

# --mode diloco: each chunk a worker claims is a round of local steps with `inner`, then one
# push of its pseudo-gradient per bucket, fragment by fragment.
struct LocalRounds {
  inner @0 :Optimizer;
  fragments @1 :UInt32;     # groups of buckets synced at staggered steps (>= 1)
  commDtype @2 :UInt8;      # 0 fp32, 1 bf16, 2 fp16, 3 int8 (per-block scales, error feedback)
  slowdown @3 :Float64;     # this worker's factor per batch (>= 1)
}

# Batches first .. first+count-1 of one epoch, handed to a worker; count 0: no work is left.
struct WorkChunk {
  epoch @0 :UInt32;
  first @1 :UInt64;
  count @2 :UInt32;
}

# The chunks one claim hands a worker, in order; none: no work is left.
struct WorkLease {
  chunks @0 :List(WorkChunk);
}

# A worker finished a chunk: its summed batch losses, and the worker's time so far.
struct Progress {
  worker @0 :UInt32;
  chunk @1 :WorkChunk;
  lossSum @2 :Float64;
  computeS @3 :Float64;     # seconds spent computing gradients so far
  wallS @4 :Float64;        # seconds since the worker started training
  staleness @5 :Float64;    # mean staleness the buckets reported for the chunk's pushes
  clock @6 :UInt64;         # the worker's logical clock after this chunk's push
  skipped @7 :Bool;         # its loss or gradient was not finite: nothing was pushed
  pushedBytes @8 :UInt64;   # --mode diloco: the bytes of the round's pseudo-gradient
  skippedLocal @9 :List(UInt32);  # --mode diloco: the round's skipped local steps (0-based)
}

# A worker's reports on the chunks it finished since its last batch, oldest first.
struct ProgressBatch {
  reports @0 :List(Progress);
}

struct EpochEntry {
  epoch @0 :UInt32;
  testAccuracy @1 :Float64;
  testLoss @2 :Float64;
  trainLoss @3 :Float64;
  wallS @4 :Float64;
}

struct JobReport {
  testAccuracy @0 :Float64;
  steps @1 :UInt64;
  wallS @2 :Float64;
  updatesApplied @3 :UInt64;
  updatesRejected @4 :UInt64;
  maxStaleness @5 :UInt64;
  meanStaleness @6 :Float64;
  restarts @7 :UInt64;
  workersLost @8 :List(Text);
  epochs @9 :List(EpochEntry);
  stalenessP50 @10 :Float64;
  stalenessP99 @11 :Float64;
  maxClockGap @12 :UInt64;
  workers @13 :List(WorkerEntry);
  figures @14 :List(Figure);  # the task's own figures (e.g. test_auc)
}

struct Figure {
  name @0 :Text;
  value @1 :Float64;
}

struct WorkerEntry {
  name @0 :Text;
  steps @1 :UInt64;
  utilization @2 :Float64;  # compute time / wall time
}

# -- saved bucket state: checkpoints and new backups -----------------------------------------------

# One part of a bucket's saved state. A saved bucket is a BucketSpec (its configuration with the
# current values and worker count) followed by these parts, each well under the message cap.
struct BucketStatePart {
  bucket @0 :UInt32;
  kind @1 :Kind;
  worker @2 :UInt32;                # read: whose copy
  tensors @3 :List(DenseTensor);    # moments and read copies: one per slice
  counters @4 :BucketCounters;
  rows @5 :TableRows;
  ranged @6 :Bool;                  # tensors are ranges of slices (name: the slice's index)
  tableState @7 :TableState;        # since schema 11
  enum Kind {
    counters @0;
    firstMoment @1;                 # Adam m, or the momentum velocity
    secondMoment @2;                # Adam v
    meanSquare @3;                  # adaptive delay compensation
    roundSum @4;                    # bsp: this round's summed gradients
    read @5;                        # what one worker last read
    rows @6;                        # embedding rows with their optimizer state
    roundRows @7;                   # bsp: this round's summed row gradients
    dash @8;                        # DASH statistics or roots of one slice (worker: the slice)
    values @9;                      # the slices' values (after a spec whose values follow)
    tableState @10;                 # one table's admission and eviction state (tableState)
  }
}

struct BucketCounters {
  clock @0 :VectorClock;
  retired @1 :List(Bool);
  start @2 :List(UInt64);           # per worker: the clock it started at, plus skipped steps
  inRound @3 :Data;                 # bsp: per worker 0 none, 1 pushed, 2 skipped
  version @4 :UInt64;
  applied @5 :UInt64;
  rejected @6 :UInt64;
  maxStaleness @7 :UInt64;
  stalenessSum @8 :UInt64;
  maxClockGap @9 :UInt64;
  histogram @10 :List(UInt64);
  nextPush @11 :List(UInt64);       # per worker: the push clock it must send next (older: a resend)
  skipped @12 :UInt64;
  duplicates @13 :UInt64;           # pushes of batches already counted here (schema 5)
  countedBatches @14 :List(WorkChunk);  # the batches this bucket counted (applied, refused or
                                        # skipped), merged ranges
}

struct TableRows {
  table @0 :Text;
  rowDim @1 :UInt32;
  ids @2 :List(UInt64);
  values @3 :Data;                  # fp32, ids.length * rowDim
  m @4 :Data;                       # fp32 first moments (empty when the optimizer has none)
  v @5 :Data;                       # fp32 second moments (empty when the optimizer has none)
  steps @6 :List(UInt64);           # per row: Adam steps taken
  marks @7 :List(UInt32);           # per row: its eviction mark (empty: no eviction); schema 11
}

# One table's admission and eviction state besides its rows (actors/bucket/sparse_table.hpp).
struct TableState {
  table @0 :Text;
  sightings @1 :Data;               # the admission sketch's byte counters (empty: admit_after 1)
  sinceHalving @2 :UInt64;
  tick @3 :UInt32;                  # lru: reads so far
  readsSinceAging @4 :UInt64;       # lfu: row reads since the marks were halved
  lastSweep @5 :UInt32;             # ttl: when rows were last expired (seconds)
  rowsEvicted @6 :UInt64;
  idsNotAdmitted @7 :UInt64;
  gradsDropped @8 :UInt64;
}

# -- checkpoints ------------------------------------------------------------------------------------

# The job's part of a checkpoint: what is done, and enough to check that a resumed job is the same.
struct JobCheckpoint {
  step @0 :UInt64;                  # batches finished by all workers when it was taken
  epochs @1 :UInt32;
  batchesPerEpoch @2 :UInt64;
  chunk @3 :UInt32;
  buckets @4 :UInt32;
  modelValues @5 :UInt64;
  nextEpoch @6 :UInt32;
  nextBatch @7 :UInt64;
  pending @8 :List(WorkChunk);      # handed out or returned, not finished: to be done again
  finished @9 :List(UInt64);        # per epoch: batches finished
  epochLoss @10 :List(Float64);
  epochBatches @11 :List(UInt64);
  evaluated @12 :UInt32;
  history @13 :List(EpochEntry);
  wallS @14 :Float64;               # training time before the checkpoint
  zeroStage @15 :UInt32;            # dp: sharded state (1, 2): the model's parameters, then pieces
}

# -- the console ------------------------------------------------------------------------------------

# A view of the running job for the console: named columns, rows of text cells.
struct Table {
  columns @0 :List(Text);
  rows @1 :List(Row);
}

struct Row {
  cells @0 :List(Text);
}

# -- an app's parameter service (troupe/parameter_service.hpp) ------------------------------------

# What a remote actor needs to use a parameter service an app_node serves: its tensors in
# order (the flat layout), its bucket plan, its client count and the timeout of each request.
# The supervisor's and the buckets' handles travel beside it in the same actor message.
struct ServiceDirectory {
  tensors @0 :List(NamedShape);
  plan @1 :Placement;
  clients @2 :UInt32;
  timeoutMs @3 :UInt64;
  tables @4 :List(TableSpec);  # embedding tables, their rows hashed over the buckets
  lanePort @5 :UInt16;         # the serving node's data lane (0: none); since schema 6
  # Since schema 8: the server nodes that hold its buckets, "HOST:PORT[/LANE],..." (empty: the
  # serving node holds them).
  servers @6 :Text;
}

struct NamedShape {
  name @0 :Text;
  shape @1 :List(UInt32);
}

# -- data-parallel groups (--mode dp) --------------------------------------------------------------

struct GroupStart {
  rank @0 :UInt32;
  size @1 :UInt32;
  generation @2 :UInt64;
  token @3 :UInt64;
  epochs @4 :UInt32;
  globalBatch @5 :UInt32;
  seed @6 :UInt64;
  optimizer @7 :Optimizer;
  bucketBytes @8 :UInt64;
  overlap @9 :Bool;
  checksumEvery @10 :UInt32;
  legacyCollective @11 :Text;  # schema version 1: the backend by name; version 2 leaves it empty
  timeoutMs @12 :UInt64;
  hosts @13 :List(Text);    # each rank's host label
  twoLevel @14 :Bool;       # reduce inside each host, then across hosts
  checkpointEvery @15 :UInt64;  # steps between member 0's saves for checkpoints (0: none)
  groupKey @16 :UInt64;         # the generation's, shared by its members (actors backend)
  collective @17 :Collective;   # the backend between members
  compression @18 :DpCompression;
  accumulate @19 :UInt32;       # micro-batches averaged before one allreduce
  balance @20 :Bool;            # shares follow the members' measured throughput
  slowdown @21 :Float64;        # this member computes F times slower (--worker-slowdown)
  client @22 :UInt32;           # --mode hybrid: its worker id at the table buckets
  delayMs @23 :UInt32;          # extra milliseconds per step (--worker-delay-ms)
  zeroStage @24 :UInt32;        # 1: the optimizer's state sharded over the members
  shardBackups @25 :UInt32;     # copies of other members' pieces each keeps
  enum Collective {
    gloo @0;
    actors @1;
    nccl @2;
  }
}

struct DpCompression {
  dtype @0 :Dtype;
  skip @1 :List(Text);          # tensors kept at fp32
  adam @2 :Adam;
  freezeStep @3 :UInt64;
  varFreezeStep @4 :UInt64;
  varUpdateScaler @5 :UInt32;
  localStepScaler @6 :UInt64;
  localStepClipper @7 :UInt32;
  enum Dtype {
    fp32 @0;
    bf16 @1;
    fp16 @2;
  }
  enum Adam {
    none @0;
    onebit @1;
    zeroOne @2;
  }
}

struct StepReport {
  rank @0 :UInt32;
  generation @1 :UInt64;
  epoch @2 :UInt32;
  step @3 :UInt64;
  lossSum @4 :Float64;
  examples @5 :UInt64;
  skipped @6 :Bool;
  allreduceS @7 :Float64;
  exposedS @8 :Float64;
  bytes @9 :UInt64;
  computeS @10 :Float64;
  wallS @11 :Float64;
  checksum @12 :UInt64;
  stepExamples @13 :UInt64;
  bytesInterHost @14 :UInt64;
  compressed @15 :Bool;         # a compressed step of 1-bit or 0/1 Adam
  ownNonFinite @16 :Bool;       # this member's own loss or gradient was not finite
}

struct StoreEntry {
  generation @0 :UInt64;
  rank @1 :UInt32;
  token @2 :UInt64;
  key @3 :Text;
  value @4 :Data;
}

# The header of one piece of a collective of the `actors` backend, sent to the member that
# needs it; its values travel beside it in the same actor message, as raw fp32 bytes
# (little-endian, bit for bit), so that they are copied once each way and never re-encoded.
struct CollectiveChunk {
  generation @0 :UInt64;
  key @1 :UInt64;           # the generation's group key: only members know it
  from @2 :UInt32;          # the sender's rank
  tag @3 :UInt32;           # the collective call
  offset @4 :UInt64;        # of the first value, within the part the call sends
  total @5 :UInt64;         # values of that part
  count @6 :UInt64;         # values in the bytes beside this header
}

# -- the standby coordinator ------------------------------------------------------------------------

struct MemberStanding {
  name @0 :Text;
  data @1 :Endpoint;
  lost @2 :Bool;
  done @3 :Bool;
  draining @4 :Bool;
  drained @5 :Bool;
  steps @6 :UInt64;
  clock @7 :UInt64;
  computeS @8 :Float64;
  wallS @9 :Float64;
}

struct HomeStanding {
  primary @0 :UInt32;        # server rank
  backups @1 :List(UInt32);  # the chain, in order
}

struct LossEvent {
  name @0 :Text;
  role @1 :Role;
  atS @2 :Float64;
  atUnixMs @3 :UInt64;
  reason @4 :Text;
}

struct TakeoverEvent {
  atS @0 :Float64;
  tookS @1 :Float64;
  term @2 :UInt64;
}

# The coordinator's state as its standby follows it.
struct Standing {
  term @0 :UInt64;
  training @1 :Bool;
  plan @2 :JobCheckpoint;
  servers @3 :List(MemberStanding);
  workers @4 :List(MemberStanding);
  homes @5 :List(HomeStanding);
  losses @6 :List(LossEvent);
  takeovers @7 :List(TakeoverEvent);
  workersLost @8 :List(Text);
  drained @9 :List(Text);
  written @10 :List(Text);
  restarts @11 :UInt64;
  escalations @12 :UInt64;
  sinceLast @13 :UInt64;
  chunksDone @14 :UInt64;
  resumedFromStep @15 :UInt64;
  recoveryS @16 :Float64;
  resumedWallS @17 :Float64;
  dp @18 :DpStanding;  # a data-parallel coordinator's; unset for the parameter service
}

# What a data-parallel coordinator's standing adds (per member lists parallel to workers).
struct DpStanding {
  generation @0 :UInt64;
  globalBatch @1 :UInt32;
  hosts @2 :List(Text);
  examples @3 :List(UInt64);
  stepExamples @4 :List(UInt64);
  appliedExamples @5 :List(UInt64);
  figureNames @6 :List(Text);
  figureValues @7 :List(Float64);
  allreduceBytes @8 :UInt64;
  bytesInterHost @9 :UInt64;
  bytesWarmup @10 :UInt64;
  bytesCompressed @11 :UInt64;
  stepsWarmup @12 :UInt64;
  stepsCompressed @13 :UInt64;
  skippedSteps @14 :UInt64;
  checksumMismatches @15 :UInt64;
  checkpoints @16 :UInt64;
  allreduceS @17 :Float64;
  exposedS @18 :Float64;
  reformS @19 :Float64;
}

# A member registers again with a coordinator that took over.
struct Rejoin {
  role @0 :Role;
  name @1 :Text;
  rank @2 :UInt32;
  data @3 :Endpoint;
  buckets @4 :List(UInt32);
  steps @5 :UInt64;
  clock @6 :UInt64;
  computeS @7 :Float64;
  wallS @8 :Float64;
  done @9 :Bool;
  held @10 :List(WorkChunk);
  finished @11 :List(WorkChunk);
  finishedLoss @12 :List(Float64);
  host @13 :Text;  # a data-parallel worker's host label
  generation @14 :UInt64;  # a data-parallel worker's newest group generation
}
