// libFuzzer target: every decode<T> of messages/codec.hpp, chosen by the first byte; the rest
// is the message. Whatever decodes must encode and decode again (the codec never accepts what
// it cannot say back). Built by tests/fuzz/CMakeLists.txt (TROUPE_FUZZ=ON, clang).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <tuple>

#include "messages/codec.hpp"

namespace {

using namespace troupe;

using decodable =
    std::tuple<pull_request, pull_reply, push_request, push_ack, bucket_spec, bucket_stats, hello,
               challenge, proof, operator_action, join_request, join_reply, heartbeat, placement,
               start_job, work_lease, progress_batch, job_report, bucket_state_part, job_checkpoint,
               table_view, group_start, step_report, store_entry, collective_chunk,
               service_directory>;

template <class T>
void round_trip(const wire& w) {
  auto decoded = decode<T>(w);
  if (!decoded) return;
  if (!decode<T>(encode(*decoded))) std::abort();  // decoded, but its encoding does not decode
}

template <size_t... I>
void dispatch(size_t which, const wire& w, std::index_sequence<I...>) {
  ((which == I ? round_trip<std::tuple_element_t<I, decodable>>(w) : void()), ...);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr size_t kinds = std::tuple_size_v<decodable>;
  const wire w{wire_bytes(data + 1, data + size)};
  dispatch(data[0] % kinds, w, std::make_index_sequence<kinds>{});
  return 0;
}
