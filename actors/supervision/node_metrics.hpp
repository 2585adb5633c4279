// The metrics every Troupe node declares (see troupe/metrics.hpp), and the series handles one
// bucket or worker actor updates. launch.cpp makes one registry per process and declares them;
// actors that get no registry (tests, benchmarks) update nothing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "troupe/metrics.hpp"

namespace troupe {

// Declares every metric below in `registry` (idempotent).
void declare_node_metrics(metrics_registry& registry);

// The node's metrics in the Prometheus text format, process metrics brought up to date
// (what a node answers the coordinator's `metrics`); "" without a registry.
std::string node_metrics_text(const std::shared_ptr<metrics_registry>& registry);

// The series of one bucket: all null without a registry.
struct bucket_metrics {
  metric_value* updates = nullptr;          // troupe_bucket_updates_total
  metric_value* rejected = nullptr;         // troupe_bucket_rejected_total
  metric_value* duplicates = nullptr;       // troupe_bucket_duplicate_pushes_total
  histogram_value* staleness = nullptr;     // troupe_push_staleness
  metric_value* bytes_in = nullptr;         // troupe_bytes_received_total
  metric_value* bytes_out = nullptr;        // troupe_bytes_sent_total
  metric_value* mailbox = nullptr;          // troupe_actor_mailbox_size
  metric_value* variance = nullptr;         // troupe_bucket_update_variance
  metric_value* device_steps = nullptr;     // troupe_dash_device_steps_total
  metric_value* device_failures = nullptr;  // troupe_dash_device_failures_total
  // Per embedding table, in `tables` order: troupe_table_rows, troupe_table_rows_evicted_total,
  // troupe_table_ids_not_admitted_total, troupe_table_grads_dropped_total.
  struct table_series {
    metric_value *rows = nullptr, *evicted = nullptr, *not_admitted = nullptr,
                 *dropped = nullptr;
  };
  std::vector<table_series> tables;

  static bucket_metrics of(const std::shared_ptr<metrics_registry>& registry, uint32_t bucket,
                           const std::vector<std::string>& tables = {});
};

// The series of one worker.
struct worker_metrics {
  metric_value* steps = nullptr;      // troupe_worker_steps_total
  metric_value* bytes_in = nullptr;   // troupe_bytes_received_total
  metric_value* bytes_out = nullptr;  // troupe_bytes_sent_total
  metric_value* loss = nullptr;       // troupe_worker_last_loss
  metric_value* mailbox = nullptr;    // troupe_actor_mailbox_size

  static worker_metrics of(const std::shared_ptr<metrics_registry>& registry,
                           const std::string& worker);
};

// The series of the coordinator: the job as a whole.
struct job_metrics {
  metric_value* batches = nullptr;      // troupe_job_batches_total
  metric_value* epochs = nullptr;       // troupe_job_epochs_done
  metric_value* accuracy = nullptr;     // troupe_job_test_accuracy
  metric_value* workers = nullptr;      // troupe_job_workers_live
  metric_value* restarts = nullptr;     // troupe_job_restarts_total
  metric_value* escalations = nullptr;  // troupe_job_escalations_total
  metric_value* lost = nullptr;         // troupe_job_members_lost_total
  metric_value* checkpoints = nullptr;  // troupe_job_checkpoints_total
  metric_value* skipped = nullptr;      // troupe_job_skipped_steps_total

  static job_metrics of(const std::shared_ptr<metrics_registry>& registry);
};

inline void add(metric_value* m, double x) {
  if (m) m->add(x);
}

inline void set(metric_value* m, double x) {
  if (m) m->set(x);
}

}  // namespace troupe
