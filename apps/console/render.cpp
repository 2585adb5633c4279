#include "console/render.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "messages/json.hpp"
#include "troupe/metrics.hpp"
#include "troupe/metrics_text.hpp"

namespace troupe::console {

namespace {

// A finite decimal number (strtod alone also takes "inf", "nan" and hex).
bool is_number(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(x);
}

std::string csv_cell(const std::string& cell) {
  if (cell == "-") return "";
  if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
  std::string out = "\"";
  for (char c : cell) out += c == '"' ? std::string{"\"\""} : std::string{c};
  return out + "\"";
}

}  // namespace

std::string as_json(const table_view& t) {
  json out = json::array();
  for (const auto& row : t.rows) {
    json object = json::object();
    for (size_t c = 0; c < t.columns.size() && c < row.size(); ++c) {
      const auto& cell = row[c];
      if (cell == "-")
        object[t.columns[c]] = nullptr;
      else if (int64_t whole = 0;
               std::from_chars(cell.data(), cell.data() + cell.size(), whole).ptr ==
               cell.data() + cell.size())
        object[t.columns[c]] = whole;
      else if (is_number(cell))
        object[t.columns[c]] = std::strtod(cell.c_str(), nullptr);
      else
        object[t.columns[c]] = cell;
    }
    out.push_back(std::move(object));
  }
  return to_text(out);
}

std::string as_table(const table_view& t) {
  std::vector<size_t> width(t.columns.size());
  for (size_t c = 0; c < t.columns.size(); ++c) width[c] = t.columns[c].size();
  for (const auto& row : t.rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c + 1 < cells.size(); ++c)
      out += fmt::format("{:<{}}  ", cells[c], width[c]);
    return out + (cells.empty() ? "" : cells.back()) + "\n";
  };
  std::string out = line(t.columns);
  for (const auto& row : t.rows) out += line(row);
  return out;
}

std::string as_csv(const table_view& t) {
  auto line = [](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) out += ',';
      out += csv_cell(cells[c]);
    }
    return out + "\n";
  };
  std::string out = line(t.columns);
  for (const auto& row : t.rows) out += line(row);
  return out;
}

table_view with_family_prefix(const table_view& metrics, const std::string& prefix) {
  table_view out{metrics.columns, {}};
  for (const auto& row : metrics.rows)
    if (row.size() == 7 && row[1].rfind(prefix, 0) == 0) out.rows.push_back(row);
  return out;
}

std::string as_exposition(const table_view& metrics, const std::string& prefix) {
  std::vector<metric_sample> samples;
  for (const auto& row : with_family_prefix(metrics, prefix).rows) {
    std::string node_label = render_labels({"node"}, {row[0]});  // {node="..."}
    node_label = node_label.substr(1, node_label.size() - 2);
    samples.push_back(metric_sample{row[1], row[2], row[3], row[4],
                                    row[5].empty() ? node_label : node_label + "," + row[5],
                                    row[6]});
  }
  return render_samples(samples);
}

}  // namespace troupe::console
