#include "actors/supervision/node_metrics.hpp"

namespace troupe {

void declare_node_metrics(metrics_registry& r) {
  r.declare("troupe_up", metric_kind::gauge, "1 while this node runs");
  r.declare("troupe_bucket_updates_total", metric_kind::counter,
            "pushes a bucket applied (or counted, under bsp)", {"bucket"});
  r.declare("troupe_bucket_rejected_total", metric_kind::counter,
            "pushes a bucket refused: malformed, wrong shape, non-finite", {"bucket"});
  r.declare("troupe_bucket_duplicate_pushes_total", metric_kind::counter,
            "pushes a bucket acknowledged without applying: it had counted their batches already",
            {"bucket"});
  r.declare("troupe_push_staleness", metric_kind::histogram,
            "updates a bucket applied between a worker's pull and its push", {"bucket"},
            {0, 1, 2, 4, 8, 16, 32, 64});
  r.declare("troupe_bucket_update_variance", metric_kind::gauge,
            "variance / mean^2 of the norms of a bucket's last 256 applied gradients", {"bucket"});
  r.declare("troupe_dash_device_steps_total", metric_kind::counter,
            "DASH steps a bucket ran on the GPU (--dash-device gpu)", {"bucket"});
  r.declare("troupe_dash_device_failures_total", metric_kind::counter,
            "DASH steps the GPU failed, which the bucket then ran on the CPU", {"bucket"});
  r.declare("troupe_table_rows", metric_kind::gauge,
            "rows a bucket holds of an embedding table", {"bucket", "table"});
  r.declare("troupe_table_rows_evicted_total", metric_kind::counter,
            "rows a bucket evicted from an embedding table (or, a backup, was told to)",
            {"bucket", "table"});
  r.declare("troupe_table_ids_not_admitted_total", metric_kind::counter,
            "reads of ids an embedding table had not admitted yet (admit_after)",
            {"bucket", "table"});
  r.declare("troupe_table_grads_dropped_total", metric_kind::counter,
            "row gradients a bucket dropped: their id had no row (not admitted, or evicted)",
            {"bucket", "table"});
  r.declare("troupe_bytes_received_total", metric_kind::counter,
            "message bytes an actor received (pushes, pull replies)", {"actor"});
  r.declare("troupe_bytes_sent_total", metric_kind::counter,
            "message bytes an actor sent (pushes, pull replies)", {"actor"});
  r.declare("troupe_actor_mailbox_size", metric_kind::gauge,
            "messages waiting in an actor's mailbox when it last handled one", {"actor"});
  r.declare("troupe_restarts_total", metric_kind::counter,
            "actors restarted by this node's supervisor", {"node"});
  r.declare("troupe_worker_steps_total", metric_kind::counter, "batches a worker computed",
            {"worker"});
  r.declare("troupe_worker_last_loss", metric_kind::gauge,
            "mean loss of the last chunk a worker computed", {"worker"});
  r.declare("troupe_job_batches_total", metric_kind::counter, "batches the job finished");
  r.declare("troupe_allreduce_bytes_total", metric_kind::counter,
            "--mode dp: bytes the members sent in collectives");
  r.declare("troupe_allreduce_seconds", metric_kind::histogram,
            "--mode dp: seconds a member spent in one step's collectives", {},
            {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 2});
  r.declare("troupe_group_generation", metric_kind::gauge,
            "--mode dp: the generation of the group (1 + the times it was formed again)");
  r.declare("troupe_group_members", metric_kind::gauge, "--mode dp: members of the group now");
  r.declare("troupe_job_epochs_done", metric_kind::gauge, "epochs evaluated so far");
  r.declare("troupe_job_test_accuracy", metric_kind::gauge, "test accuracy after the last epoch");
  r.declare("troupe_job_workers_live", metric_kind::gauge, "workers training now");
  r.declare("troupe_job_restarts_total", metric_kind::counter,
            "restarts of buckets and workers in the job");
  r.declare("troupe_job_escalations_total", metric_kind::counter, "node supervisors that gave up");
  r.declare("troupe_job_members_lost_total", metric_kind::counter, "servers and workers lost");
  r.declare("troupe_job_checkpoints_total", metric_kind::counter, "checkpoints written");
  r.declare("troupe_job_skipped_steps_total", metric_kind::counter,
            "steps skipped for a non-finite loss or gradient");
}

std::string node_metrics_text(const std::shared_ptr<metrics_registry>& registry) {
  if (!registry) return {};
  update_process_metrics(*registry);
  return registry->prometheus_text();
}

job_metrics job_metrics::of(const std::shared_ptr<metrics_registry>& r) {
  if (!r) return {};
  return job_metrics{
      r->counter("troupe_job_batches_total"),      r->gauge("troupe_job_epochs_done"),
      r->gauge("troupe_job_test_accuracy"),        r->gauge("troupe_job_workers_live"),
      r->counter("troupe_job_restarts_total"),     r->counter("troupe_job_escalations_total"),
      r->counter("troupe_job_members_lost_total"), r->counter("troupe_job_checkpoints_total"),
      r->counter("troupe_job_skipped_steps_total")};
}

bucket_metrics bucket_metrics::of(const std::shared_ptr<metrics_registry>& r, uint32_t bucket,
                                  const std::vector<std::string>& tables) {
  if (!r) return {};
  const std::string id = std::to_string(bucket);
  const std::string actor = "bucket-" + id;
  std::vector<table_series> series;
  for (const auto& t : tables)
    series.push_back(table_series{r->gauge("troupe_table_rows", {id, t}),
                                  r->counter("troupe_table_rows_evicted_total", {id, t}),
                                  r->counter("troupe_table_ids_not_admitted_total", {id, t}),
                                  r->counter("troupe_table_grads_dropped_total", {id, t})});
  return bucket_metrics{r->counter("troupe_bucket_updates_total", {id}),
                        r->counter("troupe_bucket_rejected_total", {id}),
                        r->counter("troupe_bucket_duplicate_pushes_total", {id}),
                        r->histogram("troupe_push_staleness", {id}),
                        r->counter("troupe_bytes_received_total", {actor}),
                        r->counter("troupe_bytes_sent_total", {actor}),
                        r->gauge("troupe_actor_mailbox_size", {actor}),
                        r->gauge("troupe_bucket_update_variance", {id}),
                        r->counter("troupe_dash_device_steps_total", {id}),
                        r->counter("troupe_dash_device_failures_total", {id}),
                        std::move(series)};
}

worker_metrics worker_metrics::of(const std::shared_ptr<metrics_registry>& r,
                                  const std::string& worker) {
  if (!r) return {};
  return worker_metrics{r->counter("troupe_worker_steps_total", {worker}),
                        r->counter("troupe_bytes_received_total", {worker}),
                        r->counter("troupe_bytes_sent_total", {worker}),
                        r->gauge("troupe_worker_last_loss", {worker}),
                        r->gauge("troupe_actor_mailbox_size", {worker})};
}

}  // namespace troupe
