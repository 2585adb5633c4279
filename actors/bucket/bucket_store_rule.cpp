// bucket_store's part for an app's update rule (--optimizer NAME, troupe/update_rule.hpp):
// the error of a refused push or round, and the copy that undoes one whole.
#include <fmt/format.h>

#include "actors/bucket/bucket_store.hpp"
#include "troupe/error.hpp"

namespace troupe {

using opt_kind = optimizer_config::kind;

update_rules bucket_store::rules() const {
  update_rules out;
  if (rule_) out.add(*rule_);
  return out;
}

caf::error bucket_store::rule_refused(uint64_t slices, uint64_t rows) const {
  if (slices == 0 && rows == 0) return {};
  if (!rule_)
    return make_error(errc::bad_configuration,
                      fmt::format("bucket {}: no update rule '{}' here", id_, optimizer_.rule));
  return make_error(errc::non_finite,
                    fmt::format("bucket {}: update rule '{}' made {} slices and {} rows "
                                "non-finite; nothing was applied",
                                id_, optimizer_.rule, slices, rows));
}

std::optional<bucket_store::rule_undo> bucket_store::remember_for_rule(
    const std::vector<std::pair<size_t, std::vector<uint64_t>>>& rows) const {
  if (optimizer_.type != opt_kind::app) return std::nullopt;
  rule_undo undo{{}, first_moment_, second_moment_, {}};
  for (const auto& s : slices_) undo.theta.push_back(s.values);
  for (const auto& [t, ids] : rows) undo.rows.emplace_back(t, tables_[t].copy_rows(ids));
  return undo;
}

void bucket_store::undo_rule(rule_undo& undo) {
  for (size_t i = 0; i < slices_.size(); ++i) slices_[i].values.swap(undo.theta[i]);
  first_moment_.swap(undo.m);
  second_moment_.swap(undo.v);
  for (auto& [t, copies] : undo.rows) tables_[t].restore_rows(std::move(copies));
}

std::vector<std::pair<size_t, std::vector<uint64_t>>> bucket_store::row_ids_of(
    const std::vector<sparse_rows>& rows) const {
  std::vector<std::pair<size_t, std::vector<uint64_t>>> out;
  for (const auto& r : rows) out.emplace_back(table(r.name) - tables_.data(), r.ids);
  return out;
}

}  // namespace troupe
