#include "slurm.hpp"

#include <fmt/format.h>

#include <charconv>

#include "troupe/error.hpp"

namespace troupe {

namespace {

caf::error bad(const std::string& what) {
  return make_error(errc::bad_configuration, what);
}

bool parse_u64(const std::string& text, uint64_t& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size() && !text.empty();
}

// "01-04" or "7" inside brackets: the numbers, zero-padded as the first bound is written.
caf::error expand_range(const std::string& range, std::vector<std::string>& out) {
  const auto dash = range.find('-');
  const std::string low = range.substr(0, dash);
  const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
  uint64_t a = 0, b = 0;
  if (!parse_u64(low, a) || !parse_u64(high, b) || b < a || b - a > 65535)
    return bad(fmt::format("hostlist: bad range '{}'", range));
  for (uint64_t i = a; i <= b; ++i) out.push_back(fmt::format("{:0{}}", i, low.size()));
  return {};
}

// One host expression ("n[01-04,07]-ib[1-2]"): every bracket expanded, left to right.
caf::error expand_one(const std::string& item, std::vector<std::string>& out) {
  const auto open = item.find('[');
  if (open == std::string::npos) {
    if (item.empty() || item.find(']') != std::string::npos)
      return bad(fmt::format("hostlist: bad host '{}'", item));
    out.push_back(item);
    return {};
  }
  const auto close = item.find(']', open);
  if (close == std::string::npos) return bad(fmt::format("hostlist: unclosed '[' in '{}'", item));
  std::vector<std::string> numbers;
  const std::string inside = item.substr(open + 1, close - open - 1);
  size_t start = 0;
  while (start <= inside.size()) {
    const auto comma = std::min(inside.find(',', start), inside.size());
    if (auto err = expand_range(inside.substr(start, comma - start), numbers)) return err;
    start = comma + 1;
  }
  std::vector<std::string> rest{""};  // what follows the bracket, expanded
  if (const auto suffix = item.substr(close + 1); !suffix.empty()) {
    rest.clear();
    if (auto err = expand_one(suffix, rest)) return err;
  }
  const std::string prefix = item.substr(0, open);
  for (const auto& n : numbers)
    for (const auto& r : rest) out.push_back(prefix + n + r);
  return {};
}

}  // namespace

caf::expected<std::vector<std::string>> expand_hostlist(const std::string& text) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    if (auto err = expand_one(text.substr(start, i - start), out)) return err;
    start = i + 1;
  }
  if (depth != 0) return bad(fmt::format("hostlist: unbalanced brackets in '{}'", text));
  return out;
}

uint16_t slurm_port_of_job(uint64_t job_id) {
  return static_cast<uint16_t>(10000 + 64 * (job_id % 800));
}

caf::error collect_slurm(const env_lookup& env, const std::string& port,
                         std::map<std::string, std::string>& values) {
  const auto rank = env("SLURM_PROCID");
  if (!rank || env("RANK")) return {};
  const auto tasks = env("SLURM_NTASKS");
  auto nodes = env("SLURM_STEP_NODELIST");
  if (!nodes) nodes = env("SLURM_JOB_NODELIST");
  if (!tasks || !nodes)
    return bad("SLURM_PROCID without SLURM_NTASKS and SLURM_STEP_NODELIST: run under srun");
  auto hosts = expand_hostlist(*nodes);
  if (!hosts) return std::move(hosts.error());
  uint64_t base = 0;
  if (!port.empty()) {
    if (!parse_u64(port, base) || base == 0 || base > 65535 - 64)
      return bad(fmt::format("--port {}: a port from 1 to {}", port, 65535 - 64));
  } else {
    uint64_t job = 0;
    const auto id = env("SLURM_JOB_ID");
    if (!id || !parse_u64(*id, job))
      return bad("SLURM_JOB_ID is missing or not a number: give --port");
    base = slurm_port_of_job(job);
  }
  const std::string master = fmt::format("{}:{}", hosts->front(), base);
  values["torchrun-master"] = master;
  values["coordinator"] = master;
  values["torchrun-rank"] = *rank;
  values["torchrun-world"] = *tasks;
  values["slurm-port"] = std::to_string(base);
  values["slurm-local-id"] = env("SLURM_LOCALID").value_or("0");
  values["slurm-node"] = env("SLURMD_NODENAME").value_or(hosts->front());
  return {};
}

}  // namespace troupe
