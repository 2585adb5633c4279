// A parameter client for plain code: main(), a thread of one's own, a Python loop. As ps-lite's
// `kv.Wait(kv.Pull(keys, &vals))`: pull() and push() return futures; wait() waits for one
// within a bound, and the blocking forms do both.
//
// It runs a parameter_client (troupe/parameter_service.hpp) of `id` inside an actor of its own,
// detached (it has its own thread): a call hands the request to that actor and returns, so
// nothing waits on the actor system's threads, and the requests are exactly those of the
// event-based client (each push stamped with the clocks its gradient was read at; a push named
// by its batches applied at most once per bucket; a bucket found gone found again). A client
// works for a service this process started and for one it connected to in another process
// (parameter_service::connect).
//
// Call from any thread but the actor system's. One id is one client: calls are answered in the
// order they were made. Destroying the client stops its actor; requests still in flight then
// answer errc::job_failed.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "troupe/error.hpp"
#include "troupe/parameter_service.hpp"

namespace troupe {

class blocking_parameter_client {
 public:
  // The client of `id` of `service` (errc::bad_configuration for an id the service has not).
  static caf::expected<blocking_parameter_client> open(caf::actor_system& sys,
                                                       const parameter_service& service,
                                                       uint32_t id);
  blocking_parameter_client(blocking_parameter_client&&) noexcept;
  blocking_parameter_client& operator=(blocking_parameter_client&&) noexcept;
  ~blocking_parameter_client();

  uint32_t id() const;
  size_t size() const;  // values in a snapshot (and in a gradient)
  uint64_t pushes() const;
  // The bound of one request to a bucket (the service's); a blocking call waits at most
  // twice this per try it may make.
  std::chrono::milliseconds timeout() const;
  // How each bucket is reached: "in-process", "lane" or "caf" (empty before its first request).
  std::vector<std::string> routes();

  // Starts a pull (with the embedding rows `ids`, one list per table; empty: none).
  std::future<caf::expected<parameter_snapshot>> pull_async(
      std::vector<std::vector<uint64_t>> ids = {});
  // Starts a push of `grad` (copied: the caller may reuse it at once) computed from `read`,
  // with `row_grads` for the rows `read` pulled (or none), named by `batches` (or not). What
  // parameter_client::push checks, this checks, and nothing is sent when a check fails.
  std::future<caf::expected<push_outcome>> push_async(
      std::span<const float> grad, const parameter_snapshot& read,
      std::vector<std::vector<float>> row_grads = {}, std::optional<batch_range> batches = {});

  // The future's value once it is ready, or errc::timeout when it is not within `bound`.
  template <class T>
  static caf::expected<T> wait(std::future<caf::expected<T>>& f, std::chrono::milliseconds bound);

  // Both at once, waiting at most `bound` (default: what the requests themselves may take).
  caf::expected<parameter_snapshot> pull(std::vector<std::vector<uint64_t>> ids = {},
                                         std::optional<std::chrono::milliseconds> bound = {});
  caf::expected<push_outcome> push(std::span<const float> grad, const parameter_snapshot& read,
                                   std::vector<std::vector<float>> row_grads = {},
                                   std::optional<batch_range> batches = {},
                                   std::optional<std::chrono::milliseconds> bound = {});

  struct runner;

 private:
  explicit blocking_parameter_client(std::unique_ptr<runner> r);
  std::chrono::milliseconds default_bound() const;
  std::unique_ptr<runner> runner_;
};

template <class T>
caf::expected<T> blocking_parameter_client::wait(std::future<caf::expected<T>>& f,
                                                 std::chrono::milliseconds bound) {
  if (!f.valid()) return make_error(errc::bad_configuration, "a future already waited for");
  if (f.wait_for(bound) != std::future_status::ready)
    return make_error(errc::timeout, "no answer within the bound");
  return f.get();
}

}  // namespace troupe
