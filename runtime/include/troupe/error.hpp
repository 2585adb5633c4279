// Troupe's error vocabulary: one enum, registered with CAF as the "troupe" error category so
// that errors cross actor and process boundaries as values. Every layer returns these inside
// caf::error / caf::expected; nothing throws across an actor or kernel boundary.
#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>

namespace troupe {

enum class errc : uint8_t {
  malformed_message = 1,  // bytes that are not a valid message of the expected kind
  message_too_large,      // over a byte, element or count cap
  shape_mismatch,         // a tensor whose name/shape/offset does not match what was declared
  non_finite,             // NaN or Inf where finite values are required
  unknown_bucket,         // a bucket id this actor does not own
  authentication_failed,  // a peer that could not prove it knows the cluster secret
  bad_configuration,      // flags or environment that cannot describe a valid node
  io_failure,             // files, sockets, data sets
  timeout,                // a request that got no answer in time
  job_failed,             // the job cannot go on (a server was lost, a worker failed)
  injected_fault,         // an operator crashed this actor on purpose (fault injection)
  corrupt_data,           // a checkpoint whose checksum or contents do not hold up
  not_primary,            // a bucket whose backup was promoted in its place: ask for the new one
  device_failure,         // a GPU (CUDA, cuBLAS) call failed, or there is no GPU
  collective_failed,      // an allreduce (or other collective) failed: a peer is gone or late
};

constexpr caf::atom_value error_category = caf::atom("troupe");

std::string to_string(errc code);

caf::error make_error(errc code, std::string context = {});

// Whether `err` is ours and says `code` (false for an empty error or another category's).
inline bool has_code(const caf::error& err, errc code) {
  return err && err.category() == error_category && err.code() == static_cast<uint8_t>(code);
}

// One line for a human: "shape_mismatch: bucket 3 expects fc1.w rows 0..128".
std::string describe(const caf::error& err);

}  // namespace troupe
