// How troupe-console prints what the coordinator sends it: tables as aligned text, as JSON
// arrays of objects (numbers as numbers, "-" as null), as CSV (export-curve), and the
// `metrics` table as one Prometheus text exposition with a node label on every sample.
#pragma once

#include <string>

#include "messages/types.hpp"

namespace troupe::console {

std::string as_table(const table_view& t);
std::string as_json(const table_view& t);
std::string as_csv(const table_view& t);  // "-" becomes an empty cell

// The coordinator's metrics rows (node, family, type, help, metric, labels, value) whose family
// starts with `prefix`, as a text exposition.
std::string as_exposition(const table_view& metrics, const std::string& prefix);
// Only the rows whose family starts with `prefix`.
table_view with_family_prefix(const table_view& metrics, const std::string& prefix);

}  // namespace troupe::console
