// libFuzzer target: the option and environment parser (troupe/options.hpp). The input is
// lines: "env:NAME=VALUE" sets a variable, any other line is one command-line argument.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.rfind("env:", 0) == 0) {
      const auto eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(4, eq - 4)] = line.substr(eq + 1);
    } else if (!line.empty()) {
      args.push_back(line);
    }
    start = end + 1;
  }
  const troupe::env_lookup lookup = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto parsed = troupe::parse_launch_options(args, lookup, {}, {});
  if (parsed) (void)troupe::optimizer_from(*parsed);
  return 0;
}
