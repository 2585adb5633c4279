#include "troupe/error.hpp"

#include <caf/exit_reason.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace troupe {

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
