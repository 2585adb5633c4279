// generation_store: the rendezvous keys of one group generation, as its coordinator holds them
// (the dp coordinator's, a loop group's): each key set once by a member, read by the others; a
// read of a key not yet set waits, as a response promise, until it is (at most
// max_store_waiters wait). Members prove themselves before either (the coordinator checks an
// entry's rank, token and generation). Only the actor that holds it calls it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <caf/typed_response_promise.hpp>

#include "messages/protocol.hpp"
#include "troupe/error.hpp"

namespace troupe {

// A fresh random 64-bit value: a generation's group key, a member's token.
uint64_t random_token();

// Store requests held until their key is set; more than this means something loops.
constexpr size_t max_store_waiters = 4096;

class generation_store {
 public:
  // Sets the entry's key (errc::bad_configuration for another value of a key already set,
  // message_too_large beyond the store's caps) and answers the reads that waited for it.
  caf::error put(const store_entry& entry);
  // The entry with its value when the key is set; otherwise a promise of `self`, kept until
  // the key is set or the generation ends.
  template <class Self>
  caf::result<wire> get(Self* self, store_entry entry) {
    if (auto it = keys_.find(entry.key); it != keys_.end()) {
      entry.value = it->second;
      return encode(entry);
    }
    if (waiting_ >= max_store_waiters)
      return make_error(errc::message_too_large, "store: too many requests waiting");
    ++waiting_;
    auto& waiters = waiters_[entry.key];
    waiters.push_back(self->template make_response_promise<wire>());
    return waiters.back();
  }
  // A new generation: the keys go, and the reads still waiting fail (collective_failed).
  void reset();

 private:
  std::map<std::string, std::vector<uint8_t>> keys_;
  std::map<std::string, std::vector<caf::typed_response_promise<wire>>> waiters_;
  size_t waiting_ = 0;
};

}  // namespace troupe
