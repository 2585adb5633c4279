#include "troupe/errc.hpp"

namespace troupe {

std::string to_string(errc code) {
  switch (code) {
    case errc::malformed_message:
      return "malformed_message";
    case errc::message_too_large:
      return "message_too_large";
    case errc::shape_mismatch:
      return "shape_mismatch";
    case errc::non_finite:
      return "non_finite";
    case errc::unknown_bucket:
      return "unknown_bucket";
    case errc::authentication_failed:
      return "authentication_failed";
    case errc::bad_configuration:
      return "bad_configuration";
    case errc::io_failure:
      return "io_failure";
    case errc::timeout:
      return "timeout";
    case errc::injected_fault:
      return "injected_fault";
    case errc::corrupt_data:
      return "corrupt_data";
    case errc::not_primary:
      return "not_primary";
    case errc::device_failure:
      return "device_failure";
    case errc::job_failed:
      return "job_failed";
    case errc::collective_failed:
      return "collective_failed";
    case errc::deposed:
      return "deposed";
    case errc::not_rejoined:
      return "not_rejoined";
    case errc::task_failed:
      return "task_failed";
    case errc::interrupted:
      return "interrupted";
    case errc::not_ready:
      return "not_ready";
    case errc::not_needed:
      return "not_needed";
  }
  return "unknown_error";
}

}  // namespace troupe
