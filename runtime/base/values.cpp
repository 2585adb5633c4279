#include "troupe/values.hpp"

namespace troupe {

size_t stored_bytes(uint64_t count, dtype type) {
  switch (type) {
    case dtype::f32:
      return count * 4;
    case dtype::bf16:
    case dtype::f16:
      return count * 2;
    case dtype::i8:
      return count + 4 * ((count + int8_block_values - 1) / int8_block_values);
  }
  return count * 4;
}

uint64_t numel(const std::vector<uint32_t>& shape) {
  uint64_t n = 1;
  for (uint32_t d : shape) n *= d;
  return n;
}

std::optional<eviction_policy> parse_eviction(const std::string& text) {
  using kind = eviction_policy::kind;
  if (text == "none") return eviction_policy{};
  if (text == "lru") return eviction_policy{kind::lru, 0};
  if (text == "lfu") return eviction_policy{kind::lfu, 0};
  const std::string prefix = "ttl:";
  if (text.rfind(prefix, 0) != 0 || text.size() == prefix.size() ||
      text.size() > prefix.size() + 9)
    return std::nullopt;
  uint64_t seconds = 0;
  for (char c : text.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    seconds = seconds * 10 + uint64_t(c - '0');
  }
  if (seconds == 0) return std::nullopt;
  return eviction_policy{kind::ttl, static_cast<uint32_t>(seconds)};
}

std::string to_string(eviction_policy policy) {
  switch (policy.type) {
    case eviction_policy::kind::none:
      return "none";
    case eviction_policy::kind::lru:
      return "lru";
    case eviction_policy::kind::lfu:
      return "lfu";
    case eviction_policy::kind::ttl:
      return "ttl:" + std::to_string(policy.ttl_seconds);
  }
  return "none";
}

std::string to_string(role r) {
  switch (r) {
    case role::coordinator:
      return "coordinator";
    case role::server:
      return "server";
    case role::worker:
      return "worker";
    case role::console:
      return "console";
  }
  return "unknown";
}

const char* to_string(root_solver s) {
  switch (s) {
    case root_solver::evd:
      return "evd";
    case root_solver::coupled_newton:
      return "cn";
    case root_solver::newton_db:
      return "ndb";
    case root_solver::chebyshev:
      return "cheb";
  }
  return "?";
}

const char* to_string(root_scaling s) {
  return s == root_scaling::frobenius ? "frobenius" : "power";
}

const char* to_string(dash_storage s) {
  switch (s) {
    case dash_storage::fp32:
      return "fp32";
    case dash_storage::bf16:
      return "bf16";
    case dash_storage::fp16:
      return "fp16";
  }
  return "?";
}

const char* to_string(collective_kind k) {
  switch (k) {
    case collective_kind::gloo:
      return "gloo";
    case collective_kind::actors:
      return "actors";
    case collective_kind::nccl:
      return "nccl";
  }
  return "?";
}

const char* to_string(comm_dtype d) {
  switch (d) {
    case comm_dtype::fp32:
      return "fp32";
    case comm_dtype::bf16:
      return "bf16";
    case comm_dtype::fp16:
      return "fp16";
    case comm_dtype::int8:
      return "int8";
  }
  return "?";
}

const char* to_string(compressed_adam c) {
  switch (c) {
    case compressed_adam::none:
      return "adam";
    case compressed_adam::onebit:
      return "onebit-adam";
    case compressed_adam::zero_one:
      return "zero-one-adam";
  }
  return "?";
}

const char* to_string(optimizer_config::kind k) {
  using kind = optimizer_config::kind;
  switch (k) {
    case kind::adam:
      return "adam";
    case kind::sgd:
      return "sgd";
    case kind::momentum:
      return "momentum";
    case kind::adamw:
      return "adamw";
    case kind::dash:
      return "dash";
    case kind::app:
      return "app";
    case kind::nesterov:
      return "nesterov";
    case kind::delayed_nesterov:
      return "delayed-nesterov";
  }
  return "?";
}

}  // namespace troupe
