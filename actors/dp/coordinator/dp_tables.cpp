// --mode hybrid, the group's coordinator's side of the tables: the embedding rows an
// evaluation reads, pulled from the table buckets as an observer, and the buckets' statistics
// for the report. The buckets are placed and recovered by the table coordinator
// (actors/coordinator, coordinator_config::group).
#include <fmt/format.h>

#include "actors/dp/coordinator/dp_coordinator_parts.hpp"
#include "actors/records/report.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_coordination {

namespace {

constexpr int max_attempts = 4;

// Bucket b's copy `failed` did not answer: asks the tables' coordinator where it is now (a
// backup may have taken over; not if another copy was named meanwhile), then `retry`; the job
// fails when nobody knows.
void find_table_bucket(self_ptr self, const dp_coordinator_config& config, uint32_t b,
                       const bucket_actor& failed, const caf::error& why,
                       std::function<void()> retry) {
  if (self->state.table_buckets[b] != failed) return retry();
  config.log.warn("table bucket {} did not answer ({}); asking where it is now", b, describe(why));
  self->request(config.tables, config.opts.request_timeout, which_atom_v, b, failed)
      .then(
          [=](bucket_actor& now) {
            self->state.table_buckets[b] = std::move(now);
            retry();
          },
          [=](caf::error& err) { fail(self, config, "finding table bucket: " + describe(err)); });
}

// Bucket b's share of the evaluation rows; a bucket that fails is looked up again at the
// tables' coordinator (its backup may have taken over) and asked again, a few times.
void pull_for_evaluation(self_ptr self, const dp_coordinator_config& config, uint32_t b,
                         int attempt, std::shared_ptr<eval_input> input,
                         std::shared_ptr<uint32_t> pending, std::function<void()> then) {
  auto& st = self->state;
  const auto tables = config.task->sparse_tables();
  const auto buckets = static_cast<uint32_t>(st.table_buckets.size());
  pull_request request{b, observer_worker, 0, row_requests(tables, input->rows, b, buckets)};
  const bucket_actor target = st.table_buckets[b];
  self->request(target, config.opts.request_timeout, pull_atom_v, encode(request))
      .then(
          [=](const wire& w) {
            auto reply = decode<pull_reply>(w);
            caf::error err = reply
                                 ? fill_rows(config.task->sparse_tables(), reply->rows, input->rows)
                                 : std::move(reply.error());
            if (err) return fail(self, config, "reading the tables: " + describe(err));
            if (--*pending == 0) then();
          },
          [=](caf::error& err) {
            if (attempt + 1 >= max_attempts)
              return fail(self, config,
                          fmt::format("reading the tables: bucket {}: {}", b, describe(err)));
            find_table_bucket(self, config, b, target, err, [=] {
              pull_for_evaluation(self, config, b, attempt + 1, input, pending, then);
            });
          });
}

// Asks bucket b for its statistics into `out`, looking it up again if it fails; `done` runs
// once, whatever the answer.
void stats_of(self_ptr self, const dp_coordinator_config& config, uint32_t b, int attempt,
              std::shared_ptr<std::vector<bucket_stats>> out, std::function<void()> done) {
  const bucket_actor target = self->state.table_buckets[b];
  self->request(target, config.opts.request_timeout, stats_atom_v)
      .then(
          [=](const wire& w) {
            if (auto s = decode<bucket_stats>(w)) out->push_back(std::move(*s));
            done();
          },
          [=](caf::error& err) {
            if (attempt + 1 >= max_attempts) {
              config.log.warn("no statistics from table bucket {}: {}", b, describe(err));
              return done();
            }
            find_table_bucket(self, config, b, target, err,
                              [=] { stats_of(self, config, b, attempt + 1, out, done); });
          });
}

}  // namespace

void pull_evaluation_rows(self_ptr self, const dp_coordinator_config& config,
                          std::shared_ptr<eval_input> input, std::function<void()> then) {
  auto& st = self->state;
  const auto tables = config.task->sparse_tables();
  input->rows.ids = config.task->evaluation_rows();
  size_rows(tables, input->rows);
  const auto buckets = static_cast<uint32_t>(st.table_buckets.size());
  auto pending = std::make_shared<uint32_t>(buckets);
  if (buckets == 0) return then();
  for (uint32_t b = 0; b < buckets; ++b)
    pull_for_evaluation(self, config, b, 0, input, pending, then);
}

void tables_ended(self_ptr self, const dp_coordinator_config& config, const caf::error& reason) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  if (has_code(reason, errc::deposed) || st.shell.succession.rejoining) {
    // Not fail(): the job and its report are another coordinator's.
    config.log.error("the tables' coordinator ended ({}); so does this one", describe(reason));
    st.shell.phase = job_phase::finishing;
    return self->quit(reason);
  }
  fail(self, config,
       "the tables' coordinator ended: " + (reason ? describe(reason) : std::string("it stopped")));
}

void gather_table_stats(self_ptr self, const dp_coordinator_config& config,
                        std::function<void()> then) {
  auto& st = self->state;
  auto stats = std::make_shared<std::vector<bucket_stats>>();
  auto pending = std::make_shared<size_t>(st.table_buckets.size());
  auto one_done = [=] {
    if (--*pending > 0) return;
    summarize_buckets(*stats, self->state.shell.report);
    then();
  };
  if (st.table_buckets.empty()) return then();
  for (uint32_t b = 0; b < st.table_buckets.size(); ++b)
    stats_of(self, config, b, 0, stats, one_done);
}

}  // namespace troupe::dp_coordination
