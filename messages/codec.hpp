// Encoding and decoding of every message in troupe.capnp. `wire` is the only type that carries
// message contents between processes: Cap'n Proto bytes in a std::vector<char>, which CAF 0.17
// serializes as one block. Decoding validates before it returns anything: byte, element and
// count caps, tensor shapes against their data, finite values. Errors are troupe::errc values.
// Pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <vector>

#include <caf/expected.hpp>

#include "messages/types.hpp"

namespace troupe {

// Cap'n Proto bytes of one message. Registered with CAF in messages/protocol.hpp's type-id block.
struct wire {
  std::vector<char> bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire& x) {
  return f(caf::meta::type_name("troupe::wire"), x.bytes);
}

struct codec_limits {
  size_t max_bytes = size_t{16} << 20;        // one message; CAF 0.17 struggles above 16 MiB
  uint64_t max_elements = uint64_t{8} << 20;  // all tensor elements of one message
  size_t max_tensors = 4096;
  size_t max_dims = 8;
  size_t max_text = 256;
  size_t max_clock_entries = 1 << 16;
  size_t max_list = 1 << 20;  // ids, slices, epochs
  bool require_finite = true;
};

struct encode_options {
  dtype storage = dtype::f32;  // how tensor values are stored on the wire
};

wire encode(const pull_request& x);
wire encode(const pull_reply& x, const encode_options& opts = {});
wire encode(const push_request& x, const encode_options& opts = {});
wire encode(const push_ack& x);
wire encode(const bucket_spec& x);
wire encode(const bucket_stats& x);
wire encode(const hello& x);
wire encode(const challenge& x);
wire encode(const proof& x);
wire encode(const operator_action& x);
wire encode(const join_request& x);
wire encode(const join_reply& x);
wire encode(const heartbeat& x);
wire encode(const placement& x);
wire encode(const start_job& x);
wire encode(const work_chunk& x);
wire encode(const progress& x);
wire encode(const job_report& x);
wire encode(const bucket_state_part& x);
wire encode(const job_checkpoint& x);
wire encode(const table_view& x);
wire encode(const group_start& x);
wire encode(const step_report& x);
wire encode(const store_entry& x);
wire encode(const collective_chunk& x);
wire encode(const service_directory& x);
wire encode(const coordinator_standing& x);
wire encode(const rejoin_request& x);

// decode<T>(w) for every T that encode() takes.
template <class T>
caf::expected<T> decode(const wire& w, const codec_limits& limits = {});

}  // namespace troupe
