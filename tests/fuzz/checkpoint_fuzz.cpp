// libFuzzer target: the checkpoint reader (actors/records/checkpoint_file.hpp) on arbitrary file
// bytes. The fuzz build skips the SHA-256 comparison (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION)
// so that inputs reach the decoders behind it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "actors/records/checkpoint_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto c = troupe::parse_checkpoint(std::string_view{reinterpret_cast<const char*>(data), size},
                                    "fuzz.troupe");
  if (c)
    for (const auto& bucket : c->buckets)
      for (const auto& part : bucket) (void)troupe::decode<troupe::bucket_state_part>(part);
  return 0;
}
