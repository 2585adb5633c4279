// What a kernel that can fail returns: `status` (a troupe::errc code and a sentence) or
// `result<T>` (a value or a status). The kernels know nothing of CAF; an actor that calls one
// turns a failed status into a caf::error with make_error(status) (actors/bucket/kernel_errors.hpp).
// Plain value types: any thread may use them.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "troupe/errc.hpp"

namespace troupe::kernels {

struct status {
  errc code{};  // errc{} (no code): success
  std::string what;

  bool ok() const { return code == errc{}; }
};

inline status failure(errc code, std::string what) {
  return status{code, std::move(what)};
}

// A value or the status that says why there is none; reads like caf::expected.
template <class T>
class result {
 public:
  result(T value) : state_(std::move(value)) {}
  result(status failed) : state_(std::move(failed)) {}

  explicit operator bool() const { return std::holds_alternative<T>(state_); }
  T& operator*() { return std::get<T>(state_); }
  const T& operator*() const { return std::get<T>(state_); }
  T* operator->() { return &std::get<T>(state_); }
  const T* operator->() const { return &std::get<T>(state_); }
  // The failure; only when there is no value.
  const status& error() const { return std::get<status>(state_); }

 private:
  std::variant<T, status> state_;
};

}  // namespace troupe::kernels
