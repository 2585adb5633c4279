// An app's own update rule for parameter buckets, as ps-lite's server handler: a function
// registered under a name (app_description::rules, parameter_service_config::rules) and chosen
// with `--optimizer NAME`. Only the name travels; a server whose binary lacks the rule refuses
// the placement. A bucket calls the rule on its own actor, once per dense slice and embedding
// row it updates, after staleness compensation and clipping; the rule must depend on its
// arguments alone. Its state is up to two per-value moments that the bucket keeps, saves in
// checkpoints and copies to backups as it does Adam's. A rule that leaves a non-finite value
// anywhere in a push (or bsp round) changes nothing: the bucket keeps every old value and
// answers the push with errc::non_finite, counted as rejected.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "troupe/values.hpp"

namespace troupe {

struct update_args {
  std::span<float> theta;       // the values, updated in place
  std::span<const float> grad;  // their gradient
  std::span<float> m;           // first moment (empty unless the rule keeps one)
  std::span<float> v;           // second moment (empty unless the rule keeps two)
  uint64_t step = 0;            // 1 at the first update of these values
  float lr = 0;                 // --lr, divided by 1 + staleness under --lr-staleness
  const optimizer_config* hyper =
      nullptr;  // beta1, beta2, epsilon, weight_decay as the job set them
};

struct update_rule {
  std::string name;      // what --optimizer calls it: lower-case letters, digits, '-', '_'
  unsigned moments = 0;  // per-value state buffers the bucket keeps: 0, 1 (m) or 2 (m, v)
  std::function<void(const update_args&)> apply;
};

// The rules one process knows, by name. A value: each app, service or test holds its own.
class update_rules {
 public:
  // errc::bad_configuration for a name that is not a rule name, is built in (adam, sgd, ...)
  // or is taken, for more than two moments, or for no function.
  caf::error add(update_rule rule);

  const update_rule* find(const std::string& name) const;

  // The names, comma-separated ("none" when there are none), for messages.
  std::string names() const;

 private:
  std::vector<update_rule> rules_;
};

// Whether `name` could name a rule: 1 to 64 of lower-case letters, digits, '-', '_'.
bool valid_rule_name(const std::string& name);

// The optimizer kind `name` denotes when it is built in (adam | adamw | sgd | momentum | dash).
std::optional<optimizer_config::kind> built_in_optimizer(const std::string& name);

// Whether this process can run `o`'s update rule: built in, or in `rules`.
caf::error check_rule(const optimizer_config& o, const update_rules& rules);

}  // namespace troupe
