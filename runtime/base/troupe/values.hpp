// The values a parameter service speaks in, as apps and actors hold them: tensors (dense rows,
// embedding rows, 1-bit signs), pulls and pushes with their vector-clock stamps, and the
// optimizer, consistency and compensation a job is configured with. Tensor values are always
// fp32 here; the storage dtype is chosen when encoding (messages/codec.hpp validates what
// arrives). Plain value types, no CAF: any layer and any thread may use them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "troupe/vector_clock.hpp"

namespace troupe {

// How tensor values are stored on the wire (always fp32 in memory): i8 holds a fp32 scale per
// block of 256 values, then a byte per value (kernels/cpu/int8_blocks.hpp).
enum class dtype : uint8_t { f32 = 0, bf16 = 1, f16 = 2, i8 = 3 };
constexpr uint64_t int8_block_values = 256;  // values that share one scale under dtype::i8

// Bytes that `count` values take stored as `type`.
size_t stored_bytes(uint64_t count, dtype type);

// Number of elements of a shape; 1 for the empty shape (a scalar).
uint64_t numel(const std::vector<uint32_t>& shape);

struct dense_tensor {
  std::string name;
  std::vector<uint32_t> shape;
  uint32_t row_offset = 0;
  std::vector<float> values;
};

// A dense tensor whose values stay where they are (a view into a model's flat values), so that
// encoding reads them in place. The values must outlive the view.
struct dense_view {
  std::string name;
  std::vector<uint32_t> shape;
  uint32_t row_offset = 0;
  std::span<const float> values;
};

struct sparse_rows {
  std::string name;
  uint32_t row_dim = 0;
  std::vector<uint64_t> ids;
  std::vector<float> values;  // ids.size() * row_dim
};

struct sign_tensor {
  std::string name;
  std::vector<uint32_t> shape;
  uint32_t row_offset = 0;
  float scale = 0;
  std::vector<uint8_t> bits;  // ceil(numel / 8) bytes
};

struct row_request {
  std::string table;
  std::vector<uint64_t> ids;
};

// A pull from this worker id is an observer's (the coordinator's evaluation): it is never
// held back and leaves no trace in the bucket.
constexpr uint32_t observer_worker = 0xffffffffu;

struct pull_request {
  uint32_t bucket = 0;
  uint32_t worker = 0;
  uint64_t worker_clock = 0;      // pushes done; ssp/bsp hold the reply until the clock is allowed
  std::vector<row_request> rows;  // embedding rows wanted, per table
  // A primary's mirror of this pull to its backup only: the rows it evicted before the read.
  std::vector<row_request> evicted;
};

struct pull_reply {
  uint32_t bucket = 0;
  uint64_t version = 0;
  vector_clock clock;
  std::vector<dense_tensor> tensors;
  std::vector<sparse_rows> rows;  // the rows asked for, in the order asked
};

// Batches [first, first + count) of epoch `epoch`: a work chunk (--accumulate batches), and
// what a push was computed from. A bucket applies a given batch at most once, whichever worker
// pushes it: a push of batches it already has is acknowledged and counted as a duplicate, its
// step counted as skipped.
struct batch_range {
  uint32_t epoch = 0;
  uint64_t first = 0;
  uint32_t count = 0;

  friend bool operator==(const batch_range&, const batch_range&) = default;
};

struct push_request {
  uint32_t bucket = 0;
  uint32_t worker = 0;
  uint64_t worker_clock = 0;
  vector_clock read_clock;
  std::vector<dense_tensor> dense;
  std::vector<sparse_rows> sparse;
  std::vector<sign_tensor> signs;
  bool last = false;     // the worker's final push: it no longer holds back ssp/bsp peers
  bool skipped = false;  // this step produced nothing to apply: only its clock counts
  bool resend = false;   // sent again after a failure: ignored if the bucket already counted it
  std::optional<batch_range> batches;  // none: not tracked (an app's push without an identity)
  dtype storage = dtype::f32;          // how its dense values travel (the encoding, not a field)
};

struct push_ack {
  uint32_t bucket = 0;
  uint64_t version = 0;
  uint64_t staleness = 0;
};

// DASH's choices (kernels/cpu/inverse_root.hpp, dash.hpp): how inverse roots are computed,
// how the matrices are scaled first, and how the statistics are stored.
enum class root_solver : uint8_t { evd = 0, coupled_newton = 1, newton_db = 2, chebyshev = 3 };
enum class root_scaling : uint8_t { power_iteration = 0, frobenius = 1 };
enum class dash_storage : uint8_t { fp32 = 0, bf16 = 1, fp16 = 2 };
// The names flags and reports use: evd | cn | ndb | cheb, power | frobenius, fp32 | bf16 | fp16.
const char* to_string(root_solver s);
const char* to_string(root_scaling s);
const char* to_string(dash_storage s);

// --collective: the allreduce backend between data-parallel members (gloo | actors | nccl).
enum class collective_kind : uint8_t { gloo = 0, actors = 1, nccl = 2 };
const char* to_string(collective_kind k);

// --comm-dtype: how data-parallel gradient buckets travel (fp32 | bf16 | fp16); they are summed
// in fp32 either way and the parameters stay fp32.
// int8 (--mode diloco only): per-block scales, error feedback kept on the worker.
enum class comm_dtype : uint8_t { fp32 = 0, bf16 = 1, fp16 = 2, int8 = 3 };
const char* to_string(comm_dtype d);

// --optimizer onebit-adam | zero-one-adam: data-parallel Adam whose communication is one bit
// per value after a full-precision warmup (actors/dp/compression/compressed_adam.hpp); none: as
// named.
enum class compressed_adam : uint8_t { none = 0, onebit = 1, zero_one = 2 };
const char* to_string(compressed_adam c);  // "adam" for none, "onebit-adam", "zero-one-adam"

struct optimizer_config {
  // adam: weight decay as L2; adamw: decoupled; sgd: plain; momentum: heavy ball (beta1);
  // dash: block Shampoo with Adam grafting on 2-D slices, AdamW on the others; app: the rule
  // an app registered under `rule` (troupe/update_rule.hpp). nesterov and delayed_nesterov are
  // DiLoCo's outer optimizers (--outer-optimizer): Nesterov momentum (beta1) on each update,
  // or only on every `delay`-th with the updates between applied at lr / delay (Liu et al.
  // 2024, for stale pseudo-gradients); kernels/cpu/optimizers.hpp has both.
  enum class kind : uint8_t {
    adam = 0,
    sgd = 1,
    momentum = 2,
    adamw = 3,
    dash = 4,
    app = 5,
    nesterov = 6,
    delayed_nesterov = 7
  };
  kind type = kind::adam;  // named adam | sgd | momentum | adamw | dash | nesterov |
                           // delayed-nesterov (to_string), or `rule`
  float lr = 1e-3f;
  float beta1 = 0.9f;  // Adam's first moment; the momentum coefficient
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  bool lr_staleness = false;                              // scale each step by 1 / (1 + staleness)
  uint32_t dash_block = 128;                              // dash: block size B
  uint32_t dash_freq = 10;                                // dash: steps between inverse roots
  root_solver dash_solver = root_solver::coupled_newton;  // dash: the inverse-root solver
  troupe::dash_storage dash_storage = troupe::dash_storage::fp32;  // dash: the statistics
  bool dash_nesterov = false;  // dash: precondition Adam's look-ahead moment
  root_scaling dash_scaling = root_scaling::power_iteration;  // dash: bound on lambda_max
  std::string rule;    // kind app: the rule's name; empty otherwise
  uint32_t delay = 1;  // delayed_nesterov: updates per momentum step (N >= 1)
};

const char* to_string(optimizer_config::kind k);

struct consistency_config {
  enum class mode : uint8_t { async = 0, ssp = 1, bsp = 2 };
  mode type = mode::async;
  uint32_t bound = 0;  // ssp: how many clocks a worker may run ahead of the slowest
};

struct compensation_config {
  enum class kind : uint8_t { none = 0, linear = 1, dcasgd = 2, dcasgd_adaptive = 3 };
  kind type = kind::none;
  float lambda = 0.0f;
};

// Which rows a table drops to stay within its capacity: none (a full table refuses new rows),
// the least recently read (lru), the least often read (lfu, counts halved at each eviction so
// that old fame fades), or, with ttl, rows not read for `ttl_seconds` (and the least recently
// read when the table is full).
struct eviction_policy {
  enum class kind : uint8_t { none = 0, lru = 1, lfu = 2, ttl = 3 };
  kind type = kind::none;
  uint32_t ttl_seconds = 0;  // ttl only
};

// "none", "lru", "lfu" or "ttl:SECONDS" (SECONDS at least 1); nothing for anything else.
std::optional<eviction_policy> parse_eviction(const std::string& text);
std::string to_string(eviction_policy policy);

// The most sightings admit_after may ask for (the admission counters are bytes).
constexpr uint32_t max_admit_after = 255;

// An embedding table as a bucket holds it (see troupe/task.hpp's table_spec).
struct table_config {
  std::string name;
  uint32_t row_dim = 1;
  float init_scale = 0.0f;
  uint64_t capacity = 0;  // rows the whole table may hold (a soft bound with an eviction policy)
  eviction_policy evict;
  uint32_t admit_after = 1;  // an id gets a row from its admit_after-th sighting on
};

enum class role : uint8_t { coordinator = 0, server = 1, worker = 2, console = 3 };

std::string to_string(role r);

}  // namespace troupe
