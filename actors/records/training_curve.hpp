// The job's training curve over time, as the coordinator sees it: train loss and staleness from
// the workers' progress reports, test accuracy from each evaluation. Points are taken at most
// every `every_s` seconds (and at each evaluation); the curve is bounded: when full, every
// other point is dropped and the spacing doubles, so a long job keeps its whole shape. The
// console's `export-curve` writes it as CSV. Owned by the coordinator; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "messages/types.hpp"

namespace troupe {

struct curve_point {
  double t_s = 0;                       // seconds since training started
  uint64_t step = 0;                    // batches finished by then
  uint32_t epoch = 0;                   // the epoch of the last chunk reported (1-based)
  double train_loss = 0;                // mean batch loss of the chunks since the last point
  double staleness = 0;                 // mean staleness of their pushes
  std::optional<double> test_accuracy;  // at an evaluation
};

class training_curve {
 public:
  explicit training_curve(double every_s = 0.25, size_t capacity = 4096)
      : every_s_(every_s), capacity_(capacity) {}

  // A worker finished a chunk of `batches` batches with these summed losses and mean staleness.
  void on_progress(double t_s, uint64_t step, uint32_t epoch, double loss_sum, uint32_t batches,
                   double staleness);
  // The model was evaluated after `epoch` (1-based).
  void on_evaluation(double t_s, uint64_t step, uint32_t epoch, double accuracy);

  const std::vector<curve_point>& points() const { return points_; }
  // Columns t_s, step, epoch, train_loss, staleness, test_accuracy ("-" when none).
  table_view table() const;

 private:
  void add(curve_point p);

  double every_s_;
  size_t capacity_;
  std::vector<curve_point> points_;
  // Since the last point:
  double loss_sum_ = 0, staleness_sum_ = 0;
  uint64_t batches_ = 0, reports_ = 0;
};

}  // namespace troupe
