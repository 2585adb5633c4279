// The flags every Troupe binary accepts (options.cpp parses them and writes --help from
// them). Internal to runtime/src.
#pragma once

#include <vector>

#include "troupe/options.hpp"

namespace troupe {

const std::vector<app_flag>& common_flags();

}  // namespace troupe
