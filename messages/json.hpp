// JSON for what Troupe writes for people and scripts: the job report (--report), the console's
// --json tables and benchmark rows. nlohmann::ordered_json keeps keys in the order written;
// to_text never throws: a number that is not finite is written as null (JSON has no NaN) and
// text that is not UTF-8 gets U+FFFD in place of its bad bytes. Internal to this repository.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace troupe {

using json = nlohmann::ordered_json;

// `value` as JSON text, indented by `indent` spaces per level (-1: on one line), ending in a
// newline.
std::string to_text(const json& value, int indent = 2);

}  // namespace troupe
