// answer_promise<T>: a std::promise of caf::expected<T> that always answers: dropped without a
// value (an actor that held it ended first), it answers errc::job_failed with `why`. So the
// future a blocking call waits on is never left broken (std::future_error is an exception,
// which must not reach a caller or Python). Held in a shared_ptr by whoever may answer.
// For Troupe's own blocking clients (blocking_parameter_client, loop_member).
#pragma once

#include <future>
#include <string>

#include <caf/expected.hpp>

#include "troupe/error.hpp"

namespace troupe::detail {

template <class T>
class answer_promise {
 public:
  explicit answer_promise(std::string why) : why_(std::move(why)) {}
  answer_promise(const answer_promise&) = delete;
  answer_promise& operator=(const answer_promise&) = delete;
  ~answer_promise() { set(make_error(errc::job_failed, why_)); }

  std::future<caf::expected<T>> future() { return promise_.get_future(); }
  // The first value counts; later ones are dropped.
  void set(caf::expected<T> x) {
    if (set_) return;
    set_ = true;
    promise_.set_value(std::move(x));
  }

 private:
  std::promise<caf::expected<T>> promise_;
  std::string why_;
  bool set_ = false;
};

}  // namespace troupe::detail
