// libFuzzer target: the metrics endpoint's request parser and response (metrics_response in
// troupe/metrics_http.hpp) on arbitrary request bytes, against a registry with one family of
// each kind.
#include <cstddef>
#include <cstdint>
#include <string>

#include "troupe/metrics_http.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static troupe::metrics_registry* const registry = [] {
    auto* r = new troupe::metrics_registry;  // lives as long as the fuzzer
    (void)r->declare("troupe_up", troupe::metric_kind::gauge, "up");
    (void)r->declare("troupe_pushes_total", troupe::metric_kind::counter, "pushes", {"bucket"});
    (void)r->declare("troupe_push_seconds", troupe::metric_kind::histogram, "push time", {},
                     {0.001, 0.01, 0.1});
    r->gauge("troupe_up")->set(1);
    r->counter("troupe_pushes_total", {"3"})->add(2);
    r->histogram("troupe_push_seconds")->observe(0.02);
    return r;
  }();
  const std::string request(reinterpret_cast<const char*>(data), size);
  const std::string response = troupe::metrics_response(*registry, request);
  if (response.rfind("HTTP/1.0 ", 0) != 0) __builtin_trap();
  return 0;
}
