#include "actors/dp/collective/rendezvous_store.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "troupe/error.hpp"

namespace troupe {

caf::error check_store_set(const std::map<std::string, std::vector<char>>& entries,
                           const std::string& key, const std::vector<char>& value) {
  if (key.empty() || key.size() > 256)
    return make_error(errc::bad_configuration, "store: keys are 1 to 256 characters");
  if (value.size() > max_store_value)
    return make_error(errc::message_too_large, "store: value of '" + key + "' too large");
  if (auto it = entries.find(key); it != entries.end()) {
    if (it->second == value) return {};
    return make_error(errc::bad_configuration, "store: '" + key + "' is already set");
  }
  if (entries.size() >= max_store_keys)
    return make_error(errc::message_too_large, "store: too many keys");
  return {};
}

std::string file_store::path_of(const std::string& key) const {
  static const char* hex = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) name += {hex[c >> 4], hex[c & 15]};
  return directory_ + "/" + name;
}

caf::error file_store::set(const std::string& key, std::vector<char> value) {
  if (auto err = check_store_set({}, key, value)) return err;
  const std::string path = path_of(key);
  if (auto old = get(key, std::chrono::milliseconds(0)))
    return *old == value
               ? caf::error{}
               : make_error(errc::bad_configuration, "store: '" + key + "' is already set");
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) return make_error(errc::io_failure, "store: cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    return make_error(errc::io_failure, "store: cannot rename " + temporary);
  return {};
}

caf::expected<std::vector<char>> file_store::get(const std::string& key,
                                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream in(path_of(key), std::ios::binary);
    if (in) return std::vector<char>(std::istreambuf_iterator<char>(in), {});
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error(errc::timeout, "store: nobody set '" + key + "'");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

caf::error memory_store::set(const std::string& key, std::vector<char> value) {
  std::lock_guard<std::mutex> guard{mutex_};
  if (auto err = check_store_set(entries_, key, value)) return err;
  entries_.emplace(key, std::move(value));
  changed_.notify_all();
  return {};
}

caf::expected<std::vector<char>> memory_store::get(const std::string& key,
                                                   std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock{mutex_};
  const bool found = changed_.wait_for(lock, timeout, [&] { return entries_.count(key) > 0; });
  if (!found) return make_error(errc::timeout, "store: nobody set '" + key + "'");
  return entries_.at(key);
}

}  // namespace troupe
