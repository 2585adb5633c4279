#include "actors/collective/rendezvous_store.hpp"

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
