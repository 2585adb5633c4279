// The public parameter service with real actors: pulls and pushes through parameter_client
// from an app's own actor, vector-clock staleness, refused gradients that change nothing, bad
// configurations, a bucket that crashes and is restarted with its values, a stopped service
// that answers with errors instead of hanging, ssp holding a pull back, and embedding rows
// pulled and pushed by id; the blocking client from main(), its bounds and its end.
#define BOOST_TEST_MODULE parameter_service
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <cmath>
#include <future>
#include <limits>

#include "tests/unit/expect_error.hpp"
#include "troupe/blocking_parameter_client.hpp"
#include "troupe/node.hpp"
#include "troupe/parameter_service.hpp"
#include "troupe/supervision.hpp"

using namespace troupe;
using troupe::testing::fails_with;
using troupe::testing::succeeded;

namespace {

constexpr auto answer_within = std::chrono::seconds(30);

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  fixture() {
    launch_options opts;
    opts.threads = 2;
    configure_actor_system(cfg, opts);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  // Runs `start(self, done)` in a fresh event-based actor and waits for what `done` gets.
  template <class T, class Start>
  caf::expected<T> in_actor(Start start) {
    auto result = std::make_shared<std::promise<caf::expected<T>>>();
    auto future = result->get_future();
    sys->spawn([start, result](caf::event_based_actor* self) {
      start(self, [self, result](caf::expected<T> r) {
        result->set_value(std::move(r));
        self->quit();
      });
    });
    if (future.wait_for(answer_within) != std::future_status::ready)
      return make_error(errc::timeout, "the test's actor got no answer");
    return future.get();
  }

  caf::expected<parameter_snapshot> pull(const parameter_client& c) {
    return in_actor<parameter_snapshot>([c](auto* self, auto done) { c.pull(self, done); });
  }

  caf::expected<push_outcome> push(const parameter_client& c, std::vector<float> grad,
                                   const parameter_snapshot& read) {
    return in_actor<push_outcome>(
        [c, grad, read](auto* self, auto done) { c.push(self, grad, read, done); });
  }
};

// w: 4 x 2 and b: 3 in two buckets, plain SGD at lr 0.5, initial values 0, 1, 2, ...
parameter_service_config sgd_config(uint32_t clients = 2) {
  parameter_service_config c;
  c.tensors = {{"w", {4, 2}}, {"b", {3}}};
  for (int i = 0; i < 11; ++i) c.initial.push_back(float(i));
  c.optimizer.type = optimizer_config::kind::sgd;
  c.optimizer.lr = 0.5f;
  c.buckets = 2;
  c.clients = clients;
  c.log = logger{"parameters", log_level::error};
  return c;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_push_moves_every_bucket_and_a_stale_one_is_counted, fixture) {
  auto service = parameter_service::start(*sys, sgd_config());
  BOOST_TEST_REQUIRE(succeeded(service));
  auto first = service->client(0), second = service->client(1);
  BOOST_TEST_REQUIRE(succeeded(first));
  BOOST_TEST_REQUIRE(succeeded(second));
  BOOST_TEST(first->size() == 11u);

  auto read = pull(*first);
  BOOST_TEST_REQUIRE(succeeded(read));
  BOOST_TEST(read->values == sgd_config().initial);
  BOOST_TEST(read->clocks.size() == 2u);

  auto pushed = push(*first, std::vector<float>(11, 1.0f), *read);
  BOOST_TEST_REQUIRE(succeeded(pushed));
  BOOST_TEST(pushed->staleness == 0u);
  BOOST_TEST(first->pushes() == 1u);

  // The second client's gradient was computed from the values before the first push.
  auto late = push(*second, std::vector<float>(11, 2.0f), *read);
  BOOST_TEST_REQUIRE(succeeded(late));
  BOOST_TEST(late->staleness == 1u);

  auto after = pull(*first);
  BOOST_TEST_REQUIRE(succeeded(after));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(after->values[i] == float(i) - 0.5f - 1.0f);
  BOOST_TEST(after->clocks[0].sum() == 2u);
  service->stop();
}

// A batch pushed by one client and computed again by another (as after a failure) is applied
// once: the second push is acknowledged and changes nothing; other batches still apply.
BOOST_FIXTURE_TEST_CASE(a_named_batch_is_applied_at_most_once, fixture) {
  auto service = parameter_service::start(*sys, sgd_config());
  BOOST_TEST_REQUIRE(succeeded(service));
  auto first = *service->client(0), second = *service->client(1);
  auto named_push = [&](const parameter_client& c, batch_range batches) {
    auto read = pull(c);
    BOOST_TEST_REQUIRE(succeeded(read));
    return in_actor<push_outcome>([c, read, batches](auto* self, auto done) {
      c.push(self, std::vector<float>(11, 1.0f), *read, {}, batches, done);
    });
  };
  BOOST_TEST_REQUIRE(succeeded(named_push(first, batch_range{0, 4, 2})));
  BOOST_TEST_REQUIRE(succeeded(named_push(second, batch_range{0, 5, 1})));  // batch 5 again
  auto after = pull(first);
  BOOST_TEST_REQUIRE(succeeded(after));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(after->values[i] == float(i) - 0.5f);
  BOOST_TEST(after->clocks[0].sum() == 1u);  // the duplicate applied nothing
  BOOST_TEST_REQUIRE(succeeded(named_push(second, batch_range{1, 5, 1})));  // another epoch
  after = pull(first);
  BOOST_TEST_REQUIRE(succeeded(after));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(after->values[i] == float(i) - 1.0f);
  auto read = pull(first);
  BOOST_TEST_REQUIRE(succeeded(read));
  BOOST_TEST(fails_with(
      in_actor<push_outcome>([first, read](auto* self, auto done) {
        first.push(self, std::vector<float>(11, 1.0f), *read, {}, batch_range{0, 9, 0}, done);
      }),
      errc::malformed_message));
  service->stop();
}

BOOST_FIXTURE_TEST_CASE(refused_gradients_change_nothing, fixture) {
  auto service = parameter_service::start(*sys, sgd_config());
  BOOST_TEST_REQUIRE(succeeded(service));
  auto c = *service->client(0);
  auto read = pull(c);
  BOOST_TEST_REQUIRE(succeeded(read));
  BOOST_TEST(fails_with(push(c, std::vector<float>(10, 1.0f), *read), errc::shape_mismatch));
  auto poisoned = std::vector<float>(11, 1.0f);
  poisoned[3] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(fails_with(push(c, poisoned, *read), errc::non_finite));
  poisoned[3] = std::numeric_limits<float>::infinity();
  BOOST_TEST(fails_with(push(c, poisoned, *read), errc::non_finite));
  BOOST_TEST(fails_with(push(c, std::vector<float>(11, 1.0f), parameter_snapshot{}),
                        errc::shape_mismatch));
  BOOST_TEST(c.pushes() == 0u);
  auto after = pull(c);
  BOOST_TEST_REQUIRE(succeeded(after));
  BOOST_TEST(after->values == sgd_config().initial);
  service->stop();
}

BOOST_FIXTURE_TEST_CASE(configurations_that_cannot_be_served_are_refused, fixture) {
  auto none = sgd_config();
  none.tensors.clear();
  BOOST_TEST(fails_with(parameter_service::start(*sys, none), errc::bad_configuration));
  auto sizes = sgd_config();
  sizes.initial.pop_back();
  BOOST_TEST(fails_with(parameter_service::start(*sys, sizes), errc::shape_mismatch));
  auto split = sgd_config();
  split.buckets = 8;  // 4 + 3 rows
  BOOST_TEST(fails_with(parameter_service::start(*sys, split), errc::bad_configuration));
  auto poisoned = sgd_config();
  poisoned.initial[0] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(fails_with(parameter_service::start(*sys, poisoned), errc::non_finite));
  auto service = parameter_service::start(*sys, sgd_config(2));
  BOOST_TEST_REQUIRE(succeeded(service));
  BOOST_TEST(fails_with(service->client(2), errc::bad_configuration));
  service->stop();
}

BOOST_FIXTURE_TEST_CASE(a_crashed_bucket_comes_back_with_its_values, fixture) {
  auto service = parameter_service::start(*sys, sgd_config());
  BOOST_TEST_REQUIRE(succeeded(service));
  auto c = *service->client(0);
  auto read = pull(c);
  BOOST_TEST_REQUIRE(succeeded(read));
  BOOST_TEST_REQUIRE(succeeded(push(c, std::vector<float>(11, 1.0f), *read)));
  auto bucket = in_actor<caf::actor>([sup = service->supervisor()](auto* self, auto done) {
    child_of(self, sup, "bucket-0", std::chrono::seconds(5), done);
  });
  BOOST_TEST_REQUIRE(succeeded(bucket));
  caf::anon_send_exit(*bucket, caf::exit_reason::kill);
  auto after = pull(c);  // finds bucket-0 gone, asks the supervisor, pulls the restarted one
  BOOST_TEST_REQUIRE(succeeded(after));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(after->values[i] == float(i) - 0.5f);
  BOOST_TEST(succeeded(push(c, std::vector<float>(11, 1.0f), *after)));
  service->stop();
}

BOOST_FIXTURE_TEST_CASE(a_stopped_service_answers_with_an_error, fixture) {
  auto service = parameter_service::start(*sys, sgd_config());
  BOOST_TEST_REQUIRE(succeeded(service));
  auto c = *service->client(0);
  auto read = pull(c);
  BOOST_TEST_REQUIRE(succeeded(read));
  service->stop();  // asynchronous: a pull on its way may still be answered
  caf::expected<parameter_snapshot> gone = *read;
  for (int tries = 0; gone && tries < 100; ++tries) gone = pull(c);
  BOOST_TEST_REQUIRE(!gone);
  BOOST_TEST(!has_code(gone.error(), errc::timeout));  // the test's own bound did not end it
}

BOOST_FIXTURE_TEST_CASE(ssp_holds_a_pull_until_the_slowest_client_is_within_the_bound, fixture) {
  auto config = sgd_config(2);
  config.consistency = {consistency_config::mode::ssp, 1};
  config.timeout = std::chrono::milliseconds(500);
  auto service = parameter_service::start(*sys, config);
  BOOST_TEST_REQUIRE(succeeded(service));
  auto fast = *service->client(0);
  for (int step = 0; step < 2; ++step) {
    auto read = pull(fast);
    BOOST_TEST_REQUIRE(succeeded(read));
    BOOST_TEST_REQUIRE(succeeded(push(fast, std::vector<float>(11, 0.1f), *read)));
  }
  // Two clocks ahead of a client that has not pushed: the bound is 1, so the pull waits, and
  // the service's timeout ends the wait.
  BOOST_TEST(fails_with(pull(fast), errc::timeout));
  service->stop();
}

// Embedding rows through the client: rows hashed over both buckets are created on first read
// (the same values on every read), a push with row gradients steps exactly those rows (SGD),
// and row gradients that do not fit the pull are refused before anything is sent.
BOOST_FIXTURE_TEST_CASE(embedding_rows_are_pulled_and_pushed_by_id, fixture) {
  auto config = sgd_config(1);
  config.tables = {{"emb", 2, 0.1f, 1000}};
  config.seed = 7;
  auto service = parameter_service::start(*sys, config);
  BOOST_TEST_REQUIRE(succeeded(service));
  auto c = service->client(0);
  BOOST_TEST_REQUIRE(succeeded(c));
  const std::vector<std::vector<uint64_t>> ids = {{42, 3, 42, 1000001, 8}};
  auto pull_rows = [&] {
    return in_actor<parameter_snapshot>(
        [c = *c, ids](auto* self, auto done) { c.pull(self, ids, done); });
  };
  auto first = pull_rows();
  BOOST_TEST_REQUIRE(succeeded(first));
  const std::vector<uint64_t> sorted = {3, 8, 42, 1000001};
  BOOST_TEST(first->rows.ids[0] == sorted, boost::test_tools::per_element());
  BOOST_TEST_REQUIRE(first->rows.values[0].size() == 8u);
  for (float v : first->rows.values[0]) BOOST_TEST(std::abs(v) <= 0.1f);
  std::vector<std::vector<float>> row_grads = {{1, 2, 0, 0, 0, 0, -1, 4}};  // rows 3 and 1000001
  const std::vector<float> dense(11, 0.0f);
  auto pushed =
      in_actor<push_outcome>([c = *c, dense, read = *first, row_grads](auto* self, auto done) {
        c.push(self, dense, read, row_grads, done);
      });
  BOOST_TEST_REQUIRE(succeeded(pushed));
  auto second = pull_rows();
  BOOST_TEST_REQUIRE(succeeded(second));
  for (size_t k = 0; k < 8; ++k)
    BOOST_TEST(second->rows.values[0][k] == first->rows.values[0][k] - 0.5f * row_grads[0][k],
               boost::test_tools::tolerance(1e-6f));
  std::vector<std::vector<float>> short_grads = {{1, 2}};
  auto refused =
      in_actor<push_outcome>([c = *c, dense, read = *second, short_grads](auto* self, auto done) {
        c.push(self, dense, read, short_grads, done);
      });
  BOOST_TEST(fails_with(refused, errc::shape_mismatch));
  BOOST_TEST(c->pushes() == 1u);  // the refused push sent nothing
  service->stop();
}

// The blocking client from main(): a pull, a push computed from it and the pull after it, as
// plain calls; a push and a pull in flight together (answered in order); the other client's
// push counted as staleness; a gradient of another size refused with nothing sent; a crashed
// bucket found again.
BOOST_FIXTURE_TEST_CASE(main_pulls_and_pushes_through_the_blocking_client, fixture) {
  auto service = parameter_service::start(*sys, sgd_config(2));
  BOOST_TEST_REQUIRE(succeeded(service));
  auto mine = blocking_parameter_client::open(*sys, *service, 0);
  auto other = blocking_parameter_client::open(*sys, *service, 1);
  BOOST_TEST_REQUIRE(succeeded(mine));
  BOOST_TEST_REQUIRE(succeeded(other));
  BOOST_TEST(
      fails_with(blocking_parameter_client::open(*sys, *service, 2), errc::bad_configuration));
  BOOST_TEST(mine->size() == 11u);
  auto read = mine->pull();
  BOOST_TEST_REQUIRE(succeeded(read));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(read->values[i] == float(i));
  auto theirs = other->pull();
  BOOST_TEST_REQUIRE(succeeded(theirs));
  BOOST_TEST_REQUIRE(succeeded(other->push(std::vector<float>(11, 1.0f), *theirs)));
  // Ours was read before their push: one update others applied since.
  auto pushed = mine->push_async(std::vector<float>(11, 1.0f), *read);
  auto after = mine->pull_async();
  auto outcome = blocking_parameter_client::wait(pushed, answer_within);
  BOOST_TEST_REQUIRE(succeeded(outcome));
  BOOST_TEST(outcome->staleness == 1u);
  BOOST_TEST(mine->pushes() == 1u);
  auto values = blocking_parameter_client::wait(after, answer_within);
  BOOST_TEST_REQUIRE(succeeded(values));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(values->values[i] == float(i) - 1.0f);
  BOOST_TEST(fails_with(mine->push(std::vector<float>(3, 1.0f), *values), errc::shape_mismatch));
  BOOST_TEST(mine->pushes() == 1u);
  auto bucket = in_actor<caf::actor>([sup = service->supervisor()](auto* self, auto done) {
    child_of(self, sup, "bucket-1", std::chrono::seconds(5), done);
  });
  BOOST_TEST_REQUIRE(succeeded(bucket));
  caf::anon_send_exit(*bucket, caf::exit_reason::kill);
  auto again = mine->pull();  // bucket-1 is found again through the supervisor
  BOOST_TEST_REQUIRE(succeeded(again));
  for (size_t i = 0; i < 11; ++i) BOOST_TEST(again->values[i] == float(i) - 1.0f);
  service->stop();
}

// Every wait has a bound: a pull that ssp holds ends the caller's wait at its own bound, and a
// client destroyed with that pull in flight answers it with an error instead of leaving its
// future unanswered.
BOOST_FIXTURE_TEST_CASE(a_blocking_wait_ends_at_its_bound_and_with_its_client, fixture) {
  auto config = sgd_config(2);
  config.consistency = {consistency_config::mode::ssp, 0};
  config.timeout = std::chrono::milliseconds(60000);  // the service would hold it a minute
  auto service = parameter_service::start(*sys, config);
  BOOST_TEST_REQUIRE(succeeded(service));
  std::future<caf::expected<parameter_snapshot>> held;
  {
    auto fast = blocking_parameter_client::open(*sys, *service, 0);
    BOOST_TEST_REQUIRE(succeeded(fast));
    auto read = fast->pull();
    BOOST_TEST_REQUIRE(succeeded(read));
    BOOST_TEST_REQUIRE(succeeded(fast->push(std::vector<float>(11, 0.1f), *read)));
    // One clock ahead of a client that has not pushed, at bound 0: the pull is held.
    held = fast->pull_async();
    BOOST_TEST(fails_with(blocking_parameter_client::wait(held, std::chrono::milliseconds(200)),
                          errc::timeout));
    BOOST_TEST(held.valid());  // still in flight
  }
  BOOST_TEST_REQUIRE((held.wait_for(answer_within) == std::future_status::ready));
  BOOST_TEST(fails_with(held.get(), errc::job_failed));
  service->stop();
}
