// Unit tests of the metrics registry and its endpoint: the Prometheus text format (HELP and
// TYPE lines, escaped label values, cumulative histogram buckets ending in +Inf, _sum and
// _count), refused declarations (bad names, the reserved `le` label, unsorted bounds, a second
// declaration that differs), the bound on series per metric, and a real HTTP request to the
// endpoint on loopback (200 for /metrics, 404 otherwise).
#define BOOST_TEST_MODULE metrics
#include <boost/test/unit_test.hpp>

#include "tests/integration/child_process.hpp"
#include "tests/unit/expect_error.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_http.hpp"

using namespace troupe;
using troupe::testing::http_get;
using troupe::testing::is_error;

namespace {

bool contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_CASE(counters_gauges_and_histograms_render_as_prometheus_text) {
  metrics_registry r;
  BOOST_TEST_REQUIRE(!r.declare("jobs_total", metric_kind::counter, "jobs done", {"kind"}));
  BOOST_TEST_REQUIRE(!r.declare("queue", metric_kind::gauge, "waiting\nnow"));
  BOOST_TEST_REQUIRE(
      !r.declare("latency", metric_kind::histogram, "seconds", {"op"}, {0.1, 1, 10}));
  r.counter("jobs_total", {"a\"b\\c"})->add(3);
  r.gauge("queue")->set(7.5);
  auto* h = r.histogram("latency", {"pull"});
  for (double x : {0.05, 0.5, 0.5, 5.0, 50.0}) h->observe(x);
  const std::string text = r.prometheus_text();
  BOOST_TEST_INFO(text);
  BOOST_TEST(contains(text, "# HELP jobs_total jobs done\n# TYPE jobs_total counter\n"));
  BOOST_TEST(contains(text, "jobs_total{kind=\"a\\\"b\\\\c\"} 3\n"));
  BOOST_TEST(contains(text, "# HELP queue waiting\\nnow\n"));
  BOOST_TEST(contains(text, "queue 7.5\n"));
  BOOST_TEST(contains(text, "# TYPE latency histogram\n"));
  BOOST_TEST(contains(text, "latency_bucket{op=\"pull\",le=\"0.1\"} 1\n"));
  BOOST_TEST(contains(text, "latency_bucket{op=\"pull\",le=\"1\"} 3\n"));
  BOOST_TEST(contains(text, "latency_bucket{op=\"pull\",le=\"10\"} 4\n"));
  BOOST_TEST(contains(text, "latency_bucket{op=\"pull\",le=\"+Inf\"} 5\n"));
  BOOST_TEST(contains(text, "latency_sum{op=\"pull\"} 56.05\n"));
  BOOST_TEST(contains(text, "latency_count{op=\"pull\"} 5\n"));
}

BOOST_AUTO_TEST_CASE(bad_declarations_and_wrong_uses_are_refused) {
  metrics_registry r;
  BOOST_TEST(is_error(r.declare("9lives", metric_kind::gauge, ""), errc::bad_configuration));
  BOOST_TEST(is_error(r.declare("a-b", metric_kind::gauge, ""), errc::bad_configuration));
  BOOST_TEST(
      is_error(r.declare("h", metric_kind::histogram, "", {"le"}, {1}), errc::bad_configuration));
  BOOST_TEST(
      is_error(r.declare("h", metric_kind::histogram, "", {}, {2, 1}), errc::bad_configuration));
  BOOST_TEST(!r.declare("c_total", metric_kind::counter, "", {"x"}));
  BOOST_TEST(!r.declare("c_total", metric_kind::counter, "", {"x"}));  // the same: fine
  BOOST_TEST(is_error(r.declare("c_total", metric_kind::gauge, ""), errc::bad_configuration));
  BOOST_TEST(r.counter("c_total") == nullptr);           // wrong number of label values
  BOOST_TEST(r.gauge("c_total", {"1"}) == nullptr);      // wrong kind
  BOOST_TEST(r.counter("undeclared_total") == nullptr);  // never declared
  BOOST_TEST(r.counter("c_total", {"1"}) == r.counter("c_total", {"1"}));
}

BOOST_AUTO_TEST_CASE(series_per_metric_are_bounded) {
  metrics_registry r;
  BOOST_TEST_REQUIRE(!r.declare("ids_total", metric_kind::counter, "", {"id"}));
  size_t made = 0;
  for (int i = 0; i < 10050; ++i) made += r.counter("ids_total", {std::to_string(i)}) != nullptr;
  BOOST_TEST(made == 10000u);
  BOOST_TEST(r.counter("ids_total", {"0"}) != nullptr);  // known series stay reachable
}

BOOST_AUTO_TEST_CASE(the_endpoint_serves_metrics_over_http_on_loopback) {
  auto r = std::make_shared<metrics_registry>();
  BOOST_TEST_REQUIRE(!r->declare("up", metric_kind::gauge, "1 while up"));
  r->gauge("up")->set(1);
  auto endpoint = metrics_endpoint::start(r, host_port{"127.0.0.1", 0});
  BOOST_TEST_REQUIRE(static_cast<bool>(endpoint));
  const uint16_t port = (*endpoint)->port();
  BOOST_TEST(port != 0);
  const std::string ok = http_get(port, "/metrics");
  BOOST_TEST(ok.rfind("HTTP/1.0 200 OK\r\n", 0) == 0u, ok);
  BOOST_TEST(contains(ok, "text/plain; version=0.0.4"));
  BOOST_TEST(contains(ok, "# HELP up 1 while up\n# TYPE up gauge\nup 1\n"));
  BOOST_TEST(contains(ok, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total "));
  BOOST_TEST(contains(ok, "process_resident_memory_bytes "));
  BOOST_TEST(http_get(port, "/nothing").rfind("HTTP/1.0 404", 0) == 0u);
  BOOST_TEST(is_error(metrics_endpoint::start(r, host_port{"not-an-ip", 0}).error(),
                      errc::bad_configuration));
  endpoint->reset();  // stops and joins the thread
  BOOST_TEST(http_get(port, "/metrics").empty());
}
