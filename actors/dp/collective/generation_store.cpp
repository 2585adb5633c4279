#include "actors/dp/collective/generation_store.hpp"

#include "actors/dp/collective/rendezvous_store.hpp"
#include "troupe/error.hpp"

#include <random>

namespace troupe {

uint64_t random_token() {
  std::random_device entropy;
  return (uint64_t{entropy()} << 32) ^ entropy();
}

caf::error generation_store::put(const store_entry& entry) {
  std::map<std::string, std::vector<char>> view;  // check_store_set's form of one entry
  if (auto it = keys_.find(entry.key); it != keys_.end())
    view.emplace(it->first, std::vector<char>(it->second.begin(), it->second.end()));
  if (keys_.size() >= max_store_keys) return make_error(errc::message_too_large, "store full");
  if (auto err = check_store_set(view, entry.key,
                                 std::vector<char>(entry.value.begin(), entry.value.end())))
    return err;
  keys_[entry.key] = entry.value;
  if (auto it = waiters_.find(entry.key); it != waiters_.end()) {
    const wire reply = encode(entry);
    for (auto& promise : it->second) promise.deliver(reply);
    waiting_ -= it->second.size();
    waiters_.erase(it);
  }
  return {};
}

void generation_store::reset() {
  keys_.clear();
  for (auto& [key, waiters] : waiters_)
    for (auto& promise : waiters)
      promise.deliver(make_error(errc::collective_failed, "a newer generation was formed"));
  waiters_.clear();
  waiting_ = 0;
}

}  // namespace troupe
