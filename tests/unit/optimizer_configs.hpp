// Test helper: the optimizer configurations the bucket and table tests step with. For tests
// only.
#pragma once

#include "troupe/values.hpp"

namespace troupe::testing {

// Plain SGD at learning rate `lr`.
inline optimizer_config sgd(float lr) {
  optimizer_config o;
  o.type = optimizer_config::kind::sgd;
  o.lr = lr;
  return o;
}

}  // namespace troupe::testing
