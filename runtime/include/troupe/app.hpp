// The entry point of a Troupe app: describe the app once and call run_app from main(). The
// same binary then runs the embedded default (every actor in one process) or any one role of a
// distributed job, chosen by --role (see options.hpp). Returns the process exit code: 0 when
// the job finished, non-zero with a one-line reason on stderr otherwise.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "troupe/options.hpp"
#include "troupe/task.hpp"
#include "troupe/update_rule.hpp"

namespace troupe {

struct app_description {
  std::string name;     // the binary's name, e.g. "troupe-fmnist"
  std::string summary;  // one line for --help
  std::vector<app_flag> flags;
  // The app's own defaults for common flags, e.g. {{"lr", "0.01"}, {"batch", "256"}}.
  std::map<std::string, std::string> defaults;
  // Builds the task for this process (not called on servers, which need no model).
  std::function<caf::expected<std::unique_ptr<training_task>>(const launch_options&)> make_task;
  // The app's own update rules, chosen with --optimizer NAME (troupe/update_rule.hpp).
  update_rules rules;
  // run_app is called from a library (Python's troupe.run), whose caller goes on after it: the
  // process is never ended for an actor system slow to shut down; it is left behind instead.
  bool in_library = false;
};

int run_app(int argc, char** argv, const app_description& app);

}  // namespace troupe
