// The dashboard's page, script and style, built into the binary from runtime/dashboard/ (CMake
// writes dashboard_assets.cpp at configure time). Internal to runtime/src.
#pragma once

#include <span>
#include <string_view>

namespace troupe {

struct dashboard_asset {
  std::string_view path;  // "/index.html"
  std::string_view type;  // its Content-Type
  std::string_view body;
};

std::span<const dashboard_asset> dashboard_assets();

}  // namespace troupe
