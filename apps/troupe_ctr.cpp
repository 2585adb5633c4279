// troupe-ctr: logistic regression (with an optional factorization-machine term) on hashed
// sparse features of a synthetic click log with a known ground-truth model, trained by
// Troupe's parameter service with embedding tables. Same launch flags and report as
// troupe-fmnist; the report adds test_auc, truth_auc, test_logloss and truth_logloss, and
// (--reference, on by default) reference_auc and reference_logloss: the same model trained
// sequentially in the coordinator's process (ctr/ctr_reference.hpp).
#include <cstdlib>
#include <type_traits>

#include "ctr/ctr_reference.hpp"
#include "ctr/ctr_task.hpp"
#include "troupe/app.hpp"
#include "troupe/error.hpp"

namespace {

// A flag that takes no value, or true/false (yes/no, 1/0).
caf::expected<bool> switch_value(const troupe::launch_options& opts, const std::string& flag) {
  const auto& value = opts.app_value(flag);
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  return troupe::make_error(troupe::errc::bad_configuration,
                            "--" + flag + " takes no value, or true/false, not '" + value + "'");
}

caf::expected<troupe::ctr::ctr_options> ctr_options_of(const troupe::launch_options& opts) {
  troupe::ctr::ctr_options o;
  caf::error err;
  auto read = [&](const std::string& flag, auto& field) {
    if (err) return;
    auto value = opts.app_number<std::decay_t<decltype(field)>>(flag);
    if (value)
      field = *value;
    else
      err = std::move(value.error());
  };
  read("fields", o.fields);
  read("vocabulary", o.vocabulary);
  read("zipf", o.zipf_exponent);
  read("train-examples", o.train);
  read("test-examples", o.test);
  read("fm-dim", o.fm_dim);
  read("data-seed", o.seed);
  read("capacity", o.capacity);
  read("admit-after", o.admit_after);
  if (err) return err;
  o.evict = opts.app_value("evict");
  auto stream = switch_value(opts, "stream");
  if (!stream) return std::move(stream.error());
  o.stream = *stream;
  auto tower = troupe::parse_widths("tower", opts.app_value("tower"), 4096);  // "64,32"
  if (!tower) return std::move(tower.error());
  o.tower = std::move(*tower);
  return o;
}

troupe::app_description ctr_app() {
  troupe::app_description app;
  app.name = "troupe-ctr";
  app.summary = "click-through-rate logistic regression (and FM) on sparse hashed features";
  app.flags = {
      {"fields", "F", "feature fields per example", "8", troupe::app_flag::whole},
      {"vocabulary", "V", "ids per field", "100000", troupe::app_flag::whole},
      {"zipf", "S", "id popularity: P(rank r) ~ r^-S", "1.2", troupe::app_flag::number},
      {"train-examples", "N", "training examples in the click log", "200000",
       troupe::app_flag::whole},
      {"test-examples", "N", "held-out examples", "20000", troupe::app_flag::whole},
      {"fm-dim", "K", "factorization-machine dimension (0: logistic regression only)", "0",
       troupe::app_flag::whole},
      {"data-seed", "S", "seed of the click log and its ground-truth model", "1",
       troupe::app_flag::whole},
      {"tower", "W,W...",
       "hidden widths of a dense ReLU tower over the fields' embeddings (table v, --fm-dim), "
       "DeepFM style (empty: none)",
       ""},
      {"stream", "",
       "stream the training log from its seed, batch by batch, new examples every epoch "
       "(--train-examples an epoch; nothing held in memory)",
       "false"},
      {"capacity", "N", "rows per embedding table (0: fields x vocabulary, every id there is)",
       "0", troupe::app_flag::whole},
      {"evict", "POLICY",
       "the tables' eviction: none (a full table refuses new rows), lru, lfu or ttl:SECONDS",
       "none"},
      {"admit-after", "K", "an id gets a row from its K-th read on (1..255)", "1",
       troupe::app_flag::whole},
      {"reference", "",
       "also train the same model sequentially in the coordinator's process and report "
       "reference_auc (--reference=false: not)",
       "true"},
  };
  app.defaults = {{"lr", "0.01"}, {"batch", "256"}, {"epochs", "2"}};
  app.make_task = [](const troupe::launch_options& opts)
      -> caf::expected<std::unique_ptr<troupe::training_task>> {
    auto o = ctr_options_of(opts);
    if (!o) return std::move(o.error());
    auto reference = switch_value(opts, "reference");
    if (!reference) return std::move(reference.error());
    auto task = troupe::ctr::make_ctr_task(*o);
    if (!task || !*reference) return task;
    return troupe::ctr::with_reference(std::move(*task), troupe::ctr::reference_settings_of(opts),
                                       troupe::logger{"reference", opts.level});
  };
  return app;
}

}  // namespace

int main(int argc, char** argv) {
  return troupe::run_app(argc, argv, ctr_app());
}
