// Troupe's error codes: one enum that every layer uses, from the kernels (which know nothing
// of CAF) to the actors. Plain C++: troupe/error.hpp carries these codes inside caf::error so
// that they cross actor and process boundaries as values.
#pragma once

#include <cstdint>
#include <string>

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
  deposed,                // a coordinator whose standby took over (a newer term): it must stop
  not_rejoined,           // a member asked a coordinator that is taking over before rejoining it
  task_failed,            // the user's task raised (a Python exception; its traceback is the text)
  interrupted,            // the process got a stop signal (Ctrl-C, SIGTERM) and ended its part
  not_ready,              // nothing to join yet (an app node's servers wait for a service)
  not_needed,             // the job has nothing for this node (a server of a job without tables)
};

std::string to_string(errc code);

}  // namespace troupe
