#include "troupe/error.hpp"

#include <caf/exit_reason.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

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
  }
  return "unknown_error";
}

caf::error make_error(errc code, std::string context) {
  if (context.empty()) return caf::error{static_cast<uint8_t>(code), error_category};
  return caf::error{static_cast<uint8_t>(code), error_category,
                    caf::make_message(std::move(context))};
}

std::string describe(const caf::error& err) {
  if (!err) return "no error";
  std::string what;
  if (err.category() == error_category) {
    what = to_string(static_cast<errc>(err.code()));
  } else if (err.category() == caf::atom("system")) {
    what = caf::to_string(static_cast<caf::sec>(err.code()));
  } else if (err.category() == caf::atom("exit")) {
    what = caf::to_string(static_cast<caf::exit_reason>(err.code()));
  } else {
    what = caf::to_string(err.category()) + " error " + std::to_string(err.code());
  }
  const auto& ctx = err.context();
  if (ctx.match_elements<std::string>())
    what += ": " + ctx.get_as<std::string>(0);
  else if (!ctx.empty())
    what += ": " + caf::to_string(ctx);
  return what;
}

}  // namespace troupe
