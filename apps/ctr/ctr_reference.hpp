// troupe-ctr --reference: the job's model trained on the same click log sequentially, in this
// process, so that the job's test AUC can be read against what the model family reaches
// without asynchrony (not only against the generating model's). One bucket_store holds every
// row and the dense parameters and applies the job's update rule (optimizer, learning rate,
// clip) to each batch's gradient in order, as a single worker with no staleness would see
// it. Used by troupe_ctr.cpp's task; its report gains reference_auc and reference_logloss.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "troupe/options.hpp"
#include "troupe/task.hpp"

namespace troupe::ctr {

struct reference_settings {
  optimizer_config optimizer;
  uint32_t epochs = 1;
  uint32_t batch = 1;
  uint64_t seed = 1;  // of the rows' initial values and the batch order, as the job's
  float clip = 0;
  // The most it may take: it runs inside the job's last evaluation, which has a bound of its
  // own (10 x --request-timeout); past this it gives up and reports NaN.
  std::chrono::seconds budget{150};
};

reference_settings reference_settings_of(const launch_options& o);

// Trains `task` sequentially and returns {"reference_auc", ...}, {"reference_logloss", ...}
// (NaN where training fails: the error is in the log).
std::vector<std::pair<std::string, double>> train_reference(const training_task& task,
                                                            const reference_settings& s,
                                                            const logger& log);

// `inner` whose report_figures also holds the reference's, trained once, at the first call
// (that is, at the job's end, on the coordinator).
std::unique_ptr<training_task> with_reference(std::unique_ptr<training_task> inner,
                                              reference_settings s, logger log);

}  // namespace troupe::ctr
