// Encoding and decoding of every message in troupe.capnp. `wire` is the only type that carries
// message contents between processes: Cap'n Proto bytes in a wire_bytes vector (chars that are
// not cleared when sized), which CAF 0.17 serializes as one block. Decoding validates before it
// returns anything: byte, element and count caps, tensor shapes against their data, finite
// values. Errors are troupe::errc values.
// Pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include <caf/detail/type_traits.hpp>
#include <caf/expected.hpp>

#include "messages/types.hpp"

namespace troupe {

// The messages of the data plane, as they pass between actors of one process: not encoded.
using local_message = std::variant<pull_request, pull_reply, push_request, push_ack>;

// An allocator that leaves new elements uninitialised. A wire's bytes are always written whole
// right after they are sized (by Cap'n Proto's builder, a socket read, CAF's deserialiser), so
// clearing them first was one more pass over every message for nothing.
template <class T>
struct uninitialised_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = uninitialised_allocator<U>;
  };
  uninitialised_allocator() = default;
  template <class U>
  uninitialised_allocator(const uninitialised_allocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using wire_bytes = std::vector<char, uninitialised_allocator<char>>;

}  // namespace troupe

// CAF moves a wire's bytes as one block, as it does a std::vector<char> (not byte by byte).
template <>
struct caf::detail::is_byte_sequence<troupe::wire_bytes> : std::true_type {};

namespace troupe {

// Cap'n Proto bytes of one message, or, between actors of one process, the message itself
// (`local`: nothing encoded or serialised; decode<T> copies it out) or bytes a data lane lends
// (`borrowed`). Registered with CAF in
// messages/protocol.hpp's type-id block. Only `bytes` is serialised: a local wire that
// leaves the process arrives empty and fails to decode ("empty message"), so a sender that
// may reach another process uses encode_for, and a forward uses encoded().
// Bytes in several pieces, in order (one message written without gathering it first).
using byte_parts = std::span<const std::span<const char>>;

// Bytes of a message that live elsewhere (a same-host data lane's shared ring) for as long as
// this object lives: the lane lends them to the actor that asked, which decodes them where they
// are, and frees their place by letting go (lane_ring.hpp).
struct borrowed_bytes {
  virtual ~borrowed_bytes() = default;
  std::span<const char> bytes;
};

namespace detail {
class wire_builder;
}

// A message encoded with its large tensors referenced where they are, not yet copied anywhere:
// a bucket's pull reply, which a same-host data lane writes straight into its shared ring. The
// tensors must stay as they are until it is written, so only a reader that writes it on the
// thread that delivers it asks for one (wire::reply_unwritten; lane_connection.hpp).
class unwritten_bytes {
 public:
  explicit unwritten_bytes(std::unique_ptr<detail::wire_builder> message);
  ~unwritten_bytes();
  unwritten_bytes(const unwritten_bytes&) = delete;
  unwritten_bytes& operator=(const unwritten_bytes&) = delete;
  size_t size() const { return size_; }
  // Hands the bytes to `write` in parts (the segment table, then each segment where it is),
  // valid for the call only. One thread at a time (Cap'n Proto's builder keeps state), as its
  // one reader, the lane connection that writes it, does. bytes_of() of its wire is empty.
  void write_to(const std::function<void(byte_parts)>& write) const;
  // The same bytes in one buffer.
  wire_bytes gathered() const;

 private:
  std::unique_ptr<detail::wire_builder> message_;
  size_t size_;
};

struct wire {
  wire_bytes bytes;
  std::shared_ptr<const local_message> local;
  // Set instead of `bytes` by a data lane (never serialised: only for an actor of this process).
  std::shared_ptr<const borrowed_bytes> borrowed;
  // Set instead of `bytes` by a bucket answering a request marked reply_unwritten (never
  // serialised; encoded() gathers it).
  std::shared_ptr<const unwritten_bytes> unwritten;
  // On a request: its answer may be unwritten, since the one asking writes it out before the
  // answering actor handles another message (a data lane's companion; never serialised).
  bool reply_unwritten = false;
};

// A wire's encoded bytes, wherever they are (`bytes`, or borrowed).
inline std::span<const char> bytes_of(const wire& w) {
  return w.borrowed ? w.borrowed->bytes : std::span<const char>{w.bytes.data(), w.bytes.size()};
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire& x) {
  return f(caf::meta::type_name("troupe::wire"), x.bytes);
}

// The message for an actor of this process: nothing encoded.
template <class T>
wire local_wire(T x) {
  return wire{{}, std::make_shared<const local_message>(std::move(x))};
}

struct codec_limits {
  size_t max_bytes = size_t{16} << 20;        // one message; CAF 0.17 struggles above 16 MiB
  uint64_t max_elements = uint64_t{8} << 20;  // all tensor elements of one message
  size_t max_tensors = 4096;
  size_t max_dims = 8;
  size_t max_text = 256;
  size_t max_clock_entries = 1 << 16;
  size_t max_list = 1 << 20;  // ids, slices, epochs
  // A saved bucket's spec whose values follow: the values its slices' shapes declare, which
  // the receiver allocates (16 GiB of fp32).
  uint64_t max_declared_values = uint64_t{1} << 32;
  bool require_finite = true;
};

struct encode_options {
  dtype storage = dtype::f32;  // how tensor values are stored on the wire
};

wire encode(const pull_request& x);
wire encode(const pull_reply& x, const encode_options& opts = {});
// x with `tensors` in place of x.tensors (a bucket's slices, encoded where they are).
wire encode(const pull_reply& x, const std::vector<dense_tensor>& tensors,
            const encode_options& opts = {});
// The same message unwritten: `tensors` (which must stay as they are until it is written) are
// referenced where they are and copied only by write_to or gathered.
std::shared_ptr<const unwritten_bytes> encode_unwritten(const pull_reply& x,
                                                        const std::vector<dense_tensor>& tensors,
                                                        const encode_options& opts = {});
wire encode(const push_request& x, const encode_options& opts = {});
// x with `dense` in place of x.dense: the values encoded from where they are (a worker's
// gradient), with no copy gathered first.
wire encode(const push_request& x, const std::vector<dense_view>& dense,
            const encode_options& opts = {});
// The bytes encode(x, dense) gives, handed to `write` as parts (the segment table, then each
// segment, large tensors where they are) rather than copied into one buffer: for a writer that
// sends them at once (the data lane's scatter-gather write). Returns their total size.
size_t encode_to(const push_request& x, const std::vector<dense_view>& dense,
                 const std::function<void(byte_parts)>& write, const encode_options& opts = {});
wire encode(const push_ack& x);
wire encode(const bucket_spec& x);
wire encode(const bucket_stats& x);
wire encode(const hello& x);
wire encode(const challenge& x);
wire encode(const proof& x);
wire encode(const operator_action& x);
wire encode(const join_request& x);
wire encode(const join_reply& x);
wire encode(const heartbeat& x);
wire encode(const placement& x);
wire encode(const start_job& x);
wire encode(const work_lease& x);
wire encode(const progress_batch& x);
wire encode(const job_report& x);
wire encode(const bucket_state_part& x);
wire encode(const job_checkpoint& x);
wire encode(const table_view& x);
wire encode(const group_start& x);
wire encode(const step_report& x);
wire encode(const store_entry& x);
wire encode(const collective_chunk& x);
wire encode(const service_directory& x);
wire encode(const coordinator_standing& x);
wire encode(const rejoin_request& x);

// decode<T>(w) for every T that encode() takes. A local wire gives a copy of its message
// (errc::malformed_message when it holds another type); the codec's caps are for bytes from
// other processes, so the receiver's own checks (a bucket's validate) are what apply to it.
template <class T>
caf::expected<T> decode(const wire& w, const codec_limits& limits = {});

// Where a reader keeps the values of a dense tensor it is sent (given its name, shape and row
// offset): exactly numel(shape) floats, or an empty span when it keeps no such tensor.
using value_place = std::function<std::span<float>(const dense_tensor& header)>;

// A pull reply whose dense values are written straight to where `place` says, validated as
// decode<pull_reply> validates them (a tensor `place` refuses is errc::shape_mismatch); the
// reply's tensors come back with names, shapes and offsets but no values. A local wire's values
// are copied from its message. After an error some values may have been written already.
caf::expected<pull_reply> decode_pull_into(const wire& w, const value_place& place,
                                           const codec_limits& limits = {});

// A push whose dense f32 gradients stay where they are in w's bytes, which must outlive the
// views: views[i] is the values of dense[i] (whose own values are then left empty), checked as
// decode<push_request> checks them. Values stored otherwise, and a local wire's, are copied as
// decode<push_request> copies them, and views[i] then spans dense[i].values (moving the push
// keeps them valid). For a bucket applying a push: no copy of the gradient before the update.
caf::expected<push_request> decode_push_in_place(const wire& w, const codec_limits& limits,
                                                 std::vector<std::span<const float>>& views);

// encode(x), or local_wire(x) when the receiver is an actor of this process.
template <class T>
wire encode_for(bool in_process, const T& x) {
  return in_process ? local_wire(x) : encode(x);
}

// The wire for another process: `w` itself, its local message encoded, or its borrowed or
// unwritten bytes copied.
wire encoded(const wire& w);

}  // namespace troupe
