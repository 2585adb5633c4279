// --mode hybrid, the dp plan's side of the tables: the embedding rows an evaluation reads,
// pulled from the table buckets as an observer, and starting once the tables are ready. The
// buckets are the ps plan's, in the same coordinator (actors/ps): it places and recovers
// them, and gathers their statistics for the report.
#include <fmt/format.h>

#include "actors/dp/plan/dp_plan_parts.hpp"
#include "actors/ps/ps_plan_parts.hpp"
#include "actors/records/report.hpp"
#include "actors/worker/chunk_rows.hpp"
#include "troupe/error.hpp"

namespace troupe::dp_plan {

namespace {

constexpr int max_attempts = 4;

// Bucket b's copy `failed` did not answer: `retry` once the ps plan serves the bucket from
// another copy (at once if it does already: a backup took over, or it restarted).
void when_served_again(self_ptr self, uint32_t b, const bucket_actor& failed,
                       std::function<void()> retry) {
  auto& directory = self->state.ps->directory;
  if (directory.buckets[b] && directory.buckets[b] != failed) return retry();
  directory.homes[b].when_served.push_back(std::move(retry));
}

// Bucket b's share of the evaluation rows; a bucket that fails is looked up again at the
// tables' coordinator (its backup may have taken over) and asked again, a few times.
void pull_for_evaluation(self_ptr self, const job_config& config, uint32_t b, int attempt,
                         std::shared_ptr<eval_input> input, std::shared_ptr<uint32_t> pending,
                         std::function<void()> then) {
  auto& st = self->state;
  const auto tables = config.task->sparse_tables();
  const auto buckets = static_cast<uint32_t>(st.ps->directory.buckets.size());
  pull_request request{b, observer_worker, 0, row_requests(tables, input->rows, b, buckets)};
  const bucket_actor target = st.ps->directory.buckets[b];
  self->request(target, config.opts.request_timeout, pull_atom_v, encode(request))
      .then(
          [=](const wire& w) {
            auto reply = decode<pull_reply>(w);
            caf::error err = reply
                                 ? fill_rows(config.task->sparse_tables(), reply->rows, input->rows)
                                 : std::move(reply.error());
            if (err) return fail_job(self, config, "reading the tables: " + describe(err));
            if (--*pending == 0) then();
          },
          [=](caf::error& err) {
            if (attempt + 1 >= max_attempts)
              return fail_job(self, config,
                              fmt::format("reading the tables: bucket {}: {}", b, describe(err)));
            config.log.warn("table bucket {} did not answer ({}); waiting until it is served", b,
                            describe(err));
            when_served_again(self, b, target, [=] {
              pull_for_evaluation(self, config, b, attempt + 1, input, pending, then);
            });
          });
}

}  // namespace

void pull_evaluation_rows(self_ptr self, const job_config& config,
                          std::shared_ptr<eval_input> input, std::function<void()> then) {
  auto& st = self->state;
  const auto tables = config.task->sparse_tables();
  input->rows.ids = config.task->evaluation_rows();
  size_rows(tables, input->rows);
  const auto buckets = static_cast<uint32_t>(st.ps->directory.buckets.size());
  auto pending = std::make_shared<uint32_t>(buckets);
  if (buckets == 0) return then();
  for (uint32_t b = 0; b < buckets; ++b)
    pull_for_evaluation(self, config, b, 0, input, pending, then);
}

void on_tables_ready(self_ptr self, const job_config& config) {
  auto& st = self->state;
  if (st.shell.finishing()) return;
  if (st.shell.succession.rejoining) return;  // the takeover's end forms the group
  if (st.dp->form_when_tables_ready) return form_after_takeover(self, config);
  if (!st.shell.started && live_count(st) == config.opts.workers) form_group(self, config, "start");
}

}  // namespace troupe::dp_plan
