// Unit tests of what the console's diagnostics are built from: reading the Prometheus text
// format back and writing several nodes' samples as one exposition, the bucket's update
// variance and skipped-push count, the coordinator's bounded training curve, and a node's
// shared log level.
#define BOOST_TEST_MODULE diagnostics
#include <boost/test/unit_test.hpp>

#include "actors/bucket/bucket_store.hpp"
#include "actors/records/training_curve.hpp"
#include "troupe/log.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_text.hpp"

using namespace troupe;

namespace {

bucket_spec one_slice_spec() {
  bucket_spec spec{0, 1, optimizer_config{}, {}, {}, {}};
  spec.optimizer.type = optimizer_config::kind::sgd;
  spec.optimizer.lr = 0.01f;
  spec.tensors.push_back(dense_tensor{"w", {2}, 0, {0.0f, 0.0f}});
  return spec;
}

// A push from the one worker whose gradient has L2 norm `norm`.
push_request push_with_norm(uint64_t clock, float norm) {
  push_request p{0, 0, clock, vector_clock{std::vector<uint64_t>{clock}}};
  p.dense.push_back(dense_tensor{"w", {2}, 0, {norm * 0.6f, norm * 0.8f}});
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_registry_text_reads_back_sample_by_sample) {
  metrics_registry r;
  BOOST_TEST_REQUIRE(!r.declare("jobs_total", metric_kind::counter, "jobs done", {"kind"}));
  BOOST_TEST_REQUIRE(!r.declare("latency", metric_kind::histogram, "seconds", {}, {1}));
  r.counter("jobs_total", {"a}b \"c\""})->add(3);
  r.histogram("latency")->observe(0.5);
  const auto samples = parse_prometheus_text(r.prometheus_text());
  BOOST_TEST_REQUIRE(samples.size() == 5u);  // 1 counter, 2 buckets, _sum, _count
  BOOST_TEST(samples[0].family == "jobs_total");
  BOOST_TEST(samples[0].type == "counter");
  BOOST_TEST(samples[0].help == "jobs done");
  BOOST_TEST(samples[0].labels == "kind=\"a}b \\\"c\\\"\"");  // a brace and quotes inside
  BOOST_TEST(samples[0].value == "3");
  for (size_t i = 1; i < 5; ++i) BOOST_TEST(samples[i].family == "latency");
  BOOST_TEST(samples[1].name == "latency_bucket");
  BOOST_TEST(samples[4].name == "latency_count");
  BOOST_TEST(samples[4].type == "histogram");
}

BOOST_AUTO_TEST_CASE(samples_of_several_nodes_render_each_family_once) {
  const std::string a =
      "# HELP up 1 while up\n# TYPE up gauge\nup 1\n# TYPE x_total counter\n"
      "x_total{k=\"1\"} 2\n";
  const std::string b = "# HELP up 1 while up\n# TYPE up gauge\nup 1\nnot a sample{\n";
  std::vector<metric_sample> all;
  for (const auto& [node, text] : {std::pair{"n1", a}, std::pair{"n2", b}})
    for (auto s : parse_prometheus_text(text)) {
      s.labels = std::string{"node=\""} + node + "\"" + (s.labels.empty() ? "" : "," + s.labels);
      all.push_back(s);
    }
  BOOST_TEST_REQUIRE(all.size() == 3u);  // the unclosed line is skipped
  const std::string merged = render_samples(all);
  BOOST_TEST(merged ==
             "# HELP up 1 while up\n# TYPE up gauge\nup{node=\"n1\"} 1\nup{node=\"n2\"} 1\n"
             "# TYPE x_total counter\nx_total{node=\"n1\",k=\"1\"} 2\n");
}

BOOST_AUTO_TEST_CASE(update_variance_is_the_spread_of_gradient_norms) {
  bucket_store store{one_slice_spec()};
  BOOST_TEST(store.update_variance() == 0.0);
  for (uint64_t c = 0; c < 4; ++c) BOOST_TEST_REQUIRE(!!store.apply(push_with_norm(c, 2.0f)));
  BOOST_TEST(store.update_variance() < 1e-9);  // equal norms: no spread
  store = bucket_store{one_slice_spec()};
  // Norms 1 and 3 in turn: mean 2, variance 1, so 1 / 2^2.
  for (uint64_t c = 0; c < 8; ++c)
    BOOST_TEST_REQUIRE(!!store.apply(push_with_norm(c, c % 2 ? 3.0f : 1.0f)));
  BOOST_TEST(store.update_variance() == 0.25, boost::test_tools::tolerance(1e-5));
  // Only the last update_window pushes count.
  for (uint64_t c = 8; c < 8 + bucket_store::update_window; ++c)
    BOOST_TEST_REQUIRE(!!store.apply(push_with_norm(c, 2.0f)));
  BOOST_TEST(store.update_variance() < 1e-9);
  BOOST_TEST(store.stats().update_variance == store.update_variance());
}

BOOST_AUTO_TEST_CASE(skipped_pushes_are_counted_apart_from_applied_ones) {
  bucket_store store{one_slice_spec()};
  BOOST_TEST_REQUIRE(!!store.apply(push_with_norm(0, 1.0f)));
  push_request skip{0, 0, 1, vector_clock{std::vector<uint64_t>{1}}};
  skip.skipped = true;
  BOOST_TEST_REQUIRE(!!store.apply(skip));
  BOOST_TEST(store.stats().updates_applied == 1u);
  BOOST_TEST(store.stats().updates_skipped == 1u);
  BOOST_TEST(store.stats().updates_rejected == 0u);
}

BOOST_AUTO_TEST_CASE(the_curve_takes_points_apart_and_stays_bounded) {
  training_curve curve{1.0, 8};
  curve.on_progress(0.0, 1, 1, 4.0, 2, 0.0);  // the first report is a point
  curve.on_progress(0.5, 3, 1, 3.0, 2, 1.0);  // too soon: folded into the next
  curve.on_progress(1.0, 5, 1, 1.0, 2, 3.0);
  BOOST_TEST_REQUIRE(curve.points().size() == 2u);
  BOOST_TEST(curve.points()[1].train_loss == 1.0);  // (3 + 1) / 4 batches
  BOOST_TEST(curve.points()[1].staleness == 2.0);
  curve.on_evaluation(1.2, 6, 1, 0.75);
  BOOST_TEST(curve.points().back().test_accuracy.value_or(0) == 0.75);
  for (int i = 0; i < 100; ++i) curve.on_progress(2.0 + 4.0 * i, 10 + i, 2, 1.0, 1, 0.0);
  BOOST_TEST(curve.points().size() < 8u);
  bool evaluation_kept = false;
  for (const auto& p : curve.points()) evaluation_kept = evaluation_kept || p.test_accuracy;
  BOOST_TEST(evaluation_kept);
  const auto table = curve.table();
  BOOST_TEST(table.columns.size() == 6u);
  BOOST_TEST(table.rows.size() == curve.points().size());
}

BOOST_AUTO_TEST_CASE(named_loggers_share_their_nodes_level) {
  const logger node{"node", log_level::warn};
  const logger bucket = node.named("bucket-0");
  BOOST_TEST(!bucket.enabled(log_level::debug));
  bucket.set_level(log_level::debug);
  BOOST_TEST(node.enabled(log_level::debug));
  const logger other{"other", log_level::warn};
  BOOST_TEST(!other.enabled(log_level::debug));
}
