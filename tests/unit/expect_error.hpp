// Test helpers, Boost.Test predicates that say what came back when they fail:
// fails_with(result, errc) holds when `result` is a troupe error with exactly that code, as in
// BOOST_TEST(fails_with(decode<T>(w), troupe::errc::shape_mismatch)); succeeded(result) holds
// when `result` has a value, as in BOOST_TEST_REQUIRE(succeeded(decode<T>(w))).
#pragma once

#include <boost/test/tools/assertion_result.hpp>

#include <caf/expected.hpp>

#include "kernels/status.hpp"
#include "troupe/error.hpp"

namespace troupe::testing {

inline boost::test_tools::assertion_result is_error(const caf::error& err, errc code) {
  boost::test_tools::assertion_result result{true};
  if (!err) {
    result = false;
    result.message() << "expected " << to_string(code) << ", got no error";
  } else if (err.category() != error_category || err.code() != static_cast<uint8_t>(code)) {
    result = false;
    result.message() << "expected " << to_string(code) << ", got " << describe(err);
  }
  return result;
}

template <class T>
boost::test_tools::assertion_result fails_with(const caf::expected<T>& result, errc code) {
  if (result) {
    boost::test_tools::assertion_result out{false};
    out.message() << "expected " << to_string(code) << ", got a value";
    return out;
  }
  return is_error(result.error(), code);
}

// The same for a kernel's result (kernels/status.hpp).
template <class T>
boost::test_tools::assertion_result fails_with(const kernels::result<T>& result, errc code) {
  boost::test_tools::assertion_result out{!result && result.error().code == code};
  if (result)
    out.message() << "expected " << to_string(code) << ", got a value";
  else if (!out)
    out.message() << "expected " << to_string(code) << ", got " << to_string(result.error().code)
                  << ": " << result.error().what;
  return out;
}

template <class T>
boost::test_tools::assertion_result succeeded(const caf::expected<T>& result) {
  boost::test_tools::assertion_result out{static_cast<bool>(result)};
  if (!result) out.message() << "expected a value, got " << describe(result.error());
  return out;
}

}  // namespace troupe::testing
