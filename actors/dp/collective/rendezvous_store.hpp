// The key-value store through which the members of one group generation find each other
// (Gloo's TCP addresses, NCCL's unique id). get() waits until the key is set, within a
// timeout. memory_store serves ranks that are threads of one process (tests), file_store
// processes that share a directory (troupe-bench allreduce); the members
// of a job reach the coordinator's store through actor messages (coordinator_store in
// actors/dp/trainer/allreduce_group.cpp), so only admitted members learn each other's addresses.
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/types.hpp"

namespace troupe {

class rendezvous_store {
 public:
  virtual ~rendezvous_store() = default;
  // Sets `key` once; setting it again to another value is errc::bad_configuration.
  virtual caf::error set(const std::string& key, std::vector<char> value) = 0;
  // The value of `key`, waiting for it at most `timeout` (then errc::timeout).
  virtual caf::expected<std::vector<char>> get(const std::string& key,
                                               std::chrono::milliseconds timeout) = 0;
};

// The checks every store applies to a set: sizes, and keys set once.
caf::error check_store_set(const std::map<std::string, std::vector<char>>& entries,
                           const std::string& key, const std::vector<char>& value);

// A store in a directory every member can read (one machine, or a shared file system): each
// key a file, written atomically; get() looks for it every few milliseconds until the timeout.
// Keys are hex-encoded into file names.
class file_store : public rendezvous_store {
 public:
  explicit file_store(std::string directory) : directory_(std::move(directory)) {}
  caf::error set(const std::string& key, std::vector<char> value) override;
  caf::expected<std::vector<char>> get(const std::string& key,
                                       std::chrono::milliseconds timeout) override;

 private:
  std::string path_of(const std::string& key) const;
  std::string directory_;
};

class memory_store : public rendezvous_store {
 public:
  caf::error set(const std::string& key, std::vector<char> value) override;
  caf::expected<std::vector<char>> get(const std::string& key,
                                       std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> entries_;
};

}  // namespace troupe
