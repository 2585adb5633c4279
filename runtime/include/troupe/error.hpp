// Troupe's errors as CAF values: the codes of troupe/errc.hpp in the "troupe" error category,
// so that they cross actor and process boundaries. Every layer above the kernels returns them
// inside caf::error / caf::expected; nothing throws across an actor or kernel boundary.
#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>

#include "troupe/errc.hpp"

namespace troupe {

constexpr caf::atom_value error_category = caf::atom("troupe");

caf::error make_error(errc code, std::string context = {});

// Whether `err` is ours and says `code` (false for an empty error or another category's).
inline bool has_code(const caf::error& err, errc code) {
  return err && err.category() == error_category && err.code() == static_cast<uint8_t>(code);
}

// One line for a human: "shape_mismatch: bucket 3 expects fc1.w rows 0..128".
std::string describe(const caf::error& err);

}  // namespace troupe
