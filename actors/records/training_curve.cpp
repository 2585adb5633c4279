#include "actors/records/training_curve.hpp"

#include <fmt/format.h>

namespace troupe {

void training_curve::on_progress(double t_s, uint64_t step, uint32_t epoch, double loss_sum,
                                 uint32_t batches, double staleness) {
  loss_sum_ += loss_sum;
  batches_ += batches;
  staleness_sum_ += staleness;
  ++reports_;
  if (!points_.empty() && t_s - points_.back().t_s < every_s_) return;
  add(curve_point{t_s, step, epoch, loss_sum_ / double(std::max<uint64_t>(batches_, 1)),
                  staleness_sum_ / double(reports_), std::nullopt});
}

void training_curve::on_evaluation(double t_s, uint64_t step, uint32_t epoch, double accuracy) {
  curve_point p{t_s, step, epoch, 0, 0, accuracy};
  if (batches_ > 0) {
    p.train_loss = loss_sum_ / double(batches_);
    p.staleness = staleness_sum_ / double(reports_);
  } else if (!points_.empty()) {
    p.train_loss = points_.back().train_loss;
    p.staleness = points_.back().staleness;
  }
  add(p);
}

void training_curve::add(curve_point p) {
  points_.push_back(p);
  loss_sum_ = staleness_sum_ = 0;
  batches_ = reports_ = 0;
  if (points_.size() < capacity_) return;
  // Full: keep every other point (and every evaluation), and take points half as often.
  std::vector<curve_point> kept;
  for (size_t i = 0; i < points_.size(); ++i)
    if (i % 2 == 0 || points_[i].test_accuracy || i + 1 == points_.size())
      kept.push_back(points_[i]);
  points_ = std::move(kept);
  every_s_ *= 2;
}

table_view training_curve::table() const {
  table_view t{{"t_s", "step", "epoch", "train_loss", "staleness", "test_accuracy"}, {}};
  for (const auto& p : points_)
    t.rows.push_back({fmt::format("{:.3f}", p.t_s), std::to_string(p.step), std::to_string(p.epoch),
                      fmt::format("{:.6g}", p.train_loss), fmt::format("{:.4g}", p.staleness),
                      p.test_accuracy ? fmt::format("{:.4f}", *p.test_accuracy) : "-"});
  return t;
}

}  // namespace troupe
