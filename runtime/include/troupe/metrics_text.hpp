// Reading the Prometheus text format back: what the coordinator does with the metrics every
// node sends it, so that the console's `metrics` can show all nodes as one exposition (each
// sample labelled with its node, each family's HELP and TYPE once). Pure functions; any
// thread may call them.
#pragma once

#include <string>
#include <vector>

namespace troupe {

// One sample line, with its family's TYPE and HELP.
struct metric_sample {
  std::string family;  // the name declared by TYPE (a histogram's, for its _bucket/_sum/_count)
  std::string type;    // counter, gauge, histogram, summary or untyped
  std::string help;    // as written (escaped)
  std::string name;    // the sample's own name, e.g. troupe_push_staleness_bucket
  std::string labels;  // as written between the braces, e.g. bucket="0",le="1" ("" for none)
  std::string value;
};

// The samples of a text exposition in order; lines that are neither samples nor HELP/TYPE are
// skipped, and so are samples whose labels do not close.
std::vector<metric_sample> parse_prometheus_text(const std::string& text);

// The samples as one text exposition: families in order of first appearance, each with its
// HELP and TYPE once and all its samples together (as Prometheus requires).
std::string render_samples(const std::vector<metric_sample>& samples);

}  // namespace troupe
