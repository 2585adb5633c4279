#include "messages/protocol.hpp"

#include <caf/actor_system_config.hpp>

#include "troupe/error.hpp"

namespace troupe {

void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::troupe>();
  // CAF 0.17.6's add_error_category<T> does not compile; give the renderer directly.
  cfg.add_error_category(error_category,
                         [](uint8_t code, caf::atom_value, const caf::message& context) {
                           return describe(caf::error{code, error_category, context});
                         });
}

}  // namespace troupe
