// Internal helpers shared by the codec's .cpp files: framing bytes as Cap'n Proto words,
// reading a root under limits, and converting tensors, clocks and slices in both directions.
// Not part of any public API.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "messages/troupe.capnp.h"
#include "troupe/error.hpp"

namespace troupe::detail {

// Running totals of one decode, checked against the limits as fields are read.
struct decode_budget {
  const codec_limits& limits;
  uint64_t elements = 0;
  size_t tensors = 0;
};

wire to_wire(capnp::MessageBuilder& message);

// A message built straight into the bytes of the wire that carries it: its first segment is
// the wire's buffer after the 8-byte segment table, sized by the caller's estimate, so a
// message that fits is never copied (to_wire copies the whole message once more). Further
// segments, when the estimate was short, are separate and finish() copies then, as to_wire.
class wire_builder : public capnp::MessageBuilder {
 public:
  explicit wire_builder(size_t first_segment_words);
  kj::ArrayPtr<capnp::word> allocateSegment(unsigned minimum_words) override;
  // The wire, once; the builder is empty afterwards.
  wire finish();
  // The same bytes handed to `write` in parts (the segment table, then each segment where it
  // is) instead of copied into one buffer; their total size.
  size_t write_parts(const std::function<void(byte_parts)>& write);

 private:
  wire out_;
  size_t first_words_;
  bool first_given_ = false;
  std::vector<kj::Array<capnp::word>> more_;
};

// Copies a Cap'n Proto primitive list (its iterators are not standard iterators).
template <class T>
std::vector<T> to_vector(typename capnp::List<T>::Reader list) {
  std::vector<T> out;
  out.reserve(list.size());
  for (T x : list) out.push_back(x);
  return out;
}

// Frames `w` as a Cap'n Proto message and calls read(root, budget) -> caf::expected<T>.
// Catches every kj::Exception the reader throws and returns it as errc::malformed_message.
template <class Root, class T, class Read>
caf::expected<T> read_root(const wire& w, const codec_limits& limits, Read&& read);

// The text, or errc::message_too_large when it is longer than limits.max_text.
caf::expected<std::string> read_text(capnp::Text::Reader text, const decode_budget& budget,
                                     const char* what);

void write_tables(capnp::List<schema::TableSpec>::Builder out,
                  const std::vector<table_config>& tables);
caf::expected<std::vector<table_config>> read_tables(capnp::List<schema::TableSpec>::Reader in,
                                                     decode_budget& budget);

void write_placement(schema::Placement::Builder out, const placement& x);
caf::expected<placement> read_placement(schema::Placement::Reader in, decode_budget& budget);

void write_shape(capnp::List<uint32_t>::Builder out, const std::vector<uint32_t>& shape);
// A shape of at most `most` elements (0: the budget's max_elements).
caf::expected<std::vector<uint32_t>> read_shape(capnp::List<uint32_t>::Reader in,
                                                decode_budget& budget, uint64_t most = 0);

// Stores `values` into `out`, which the caller sized as stored_bytes(values.size(), storage).
void write_values(capnp::Data::Builder out, std::span<const float> values, dtype storage);
// Widens `data` (stored as `type`) into `count` fp32 values, checking size and finiteness.
caf::expected<std::vector<float>> read_values(capnp::Data::Reader data, schema::DType type,
                                              uint64_t count, decode_budget& budget,
                                              const std::string& what);
// The same into `out` (its size is the count): nothing allocated.
caf::error read_values_into(capnp::Data::Reader data, schema::DType type, std::span<float> out,
                            decode_budget& budget, const std::string& what);
// The same checks, the f32 values left where they are in the message; no span (and no error)
// when they are stored otherwise or not aligned as floats: then read_values copies them.
caf::expected<std::optional<std::span<const float>>> view_values(capnp::Data::Reader data,
                                                                 schema::DType type, uint64_t count,
                                                                 decode_budget& budget,
                                                                 const std::string& what);

// `reference`: the values become a segment of their own that points at them where they are
// (Cap'n Proto's external data; nothing zeroed and copied into the message first, which then
// copies them once into the wire). Only for f32 storage of word-aligned values a whole number
// of words long, which must outlive the builder: see referenceable().
void write_dense(schema::DenseTensor::Builder out, const dense_tensor& x, dtype storage,
                 bool reference = false);
void write_dense(schema::DenseTensor::Builder out, const dense_view& x, dtype storage,
                 bool reference = false);
// Whether write_dense may reference `values`: f32 storage, at least 64 KiB, word-aligned, a
// whole number of words (a referenced blob's padding would come from past its end).
bool referenceable(std::span<const float> values, dtype storage);
// At most this many referenced blobs per message: each is a segment, and readers take 512.
constexpr unsigned max_referenced = 64;
caf::expected<dense_tensor> read_dense(schema::DenseTensor::Reader in, decode_budget& budget);
// A dense tensor's name, shape (of at most `most` elements, as read_shape) and row offset,
// checked; its values are left unread.
caf::expected<dense_tensor> read_dense_header(schema::DenseTensor::Reader in, decode_budget& budget,
                                              uint64_t most = 0);
// A dense tensor written with its shape only (no data): the values its shape declares count
// against `declared`, which may not pass budget.limits.max_declared_values.
caf::expected<dense_tensor> read_dense_shape_only(schema::DenseTensor::Reader in,
                                                  decode_budget& budget, uint64_t& declared);

void write_sparse(schema::SparseRows::Builder out, const sparse_rows& x, dtype storage);
caf::expected<sparse_rows> read_sparse(schema::SparseRows::Reader in, decode_budget& budget);

void write_sign(schema::SignTensor::Builder out, const sign_tensor& x);
caf::expected<sign_tensor> read_sign(schema::SignTensor::Reader in, decode_budget& budget);

// The optimizer of a bucket spec or a data-parallel group: kinds and DASH settings checked.
void write_optimizer(schema::Optimizer::Builder out, const optimizer_config& x);
caf::expected<optimizer_config> read_optimizer(schema::Optimizer::Reader in,
                                               const decode_budget& budget);

void write_clock(schema::VectorClock::Builder out, const vector_clock& clock);
caf::expected<vector_clock> read_clock(schema::VectorClock::Reader in, const decode_budget& budget);

// A push's (and a saved record's) batches start below this: far past any job's batches, and
// first + count still fits.
constexpr uint64_t max_batch_index = uint64_t{1} << 48;

void write_chunk(schema::WorkChunk::Builder out, const work_chunk& x);
work_chunk read_chunk(schema::WorkChunk::Reader in);
// A list of chunks (a lease, a rejoin's held and finished ones): none of them empty.
void write_chunks(capnp::List<schema::WorkChunk>::Builder out, const std::vector<work_chunk>& in);
caf::expected<std::vector<work_chunk>> read_chunks(capnp::List<schema::WorkChunk>::Reader in,
                                                   const decode_budget& budget);

// Epoch entries of the report and of a checkpoint's history.
caf::expected<role> read_role(schema::Role in);
schema::Role write_role(role r);
void write_endpoint(schema::Endpoint::Builder out, const endpoint& x);
caf::expected<endpoint> read_endpoint(schema::Endpoint::Reader in, const decode_budget& budget);

void write_job_checkpoint(schema::JobCheckpoint::Builder out, const job_checkpoint& x);
caf::expected<job_checkpoint> read_job_checkpoint(schema::JobCheckpoint::Reader in,
                                                  const decode_budget& budget);

void write_epochs(capnp::List<schema::EpochEntry>::Builder out,
                  const std::vector<epoch_entry>& epochs);
std::vector<epoch_entry> read_epochs(capnp::List<schema::EpochEntry>::Reader in);

void write_bytes(capnp::Data::Builder out, const std::vector<uint8_t>& bytes);
caf::expected<std::vector<uint8_t>> read_bytes(capnp::Data::Reader in, size_t max,
                                               const char* what);

// -- implementation of the template ------------------------------------------------------------

// The words of a message: a view of the wire's own bytes, or of an aligned copy of them.
struct framed_words {
  kj::ArrayPtr<const capnp::word> words;
  kj::Array<capnp::word> copy;
};

caf::expected<framed_words> frame_words(const wire& w, const codec_limits& limits);

// A copy of the message a local wire carries.
template <class T>
caf::expected<T> read_local(const local_message& local) {
  constexpr bool data_plane = std::is_same_v<T, pull_request> || std::is_same_v<T, pull_reply> ||
                              std::is_same_v<T, push_request> || std::is_same_v<T, push_ack>;
  if constexpr (data_plane)
    if (const T* x = std::get_if<T>(&local)) return *x;
  return make_error(errc::malformed_message, "a local message of another type");
}

template <class Root, class T, class Read>
caf::expected<T> read_root(const wire& w, const codec_limits& limits, Read&& read) {
  if (w.local) return read_local<T>(*w.local);
  auto framed = frame_words(w, limits);
  if (!framed) return std::move(framed.error());
  const auto words = framed->words;
  try {
    capnp::ReaderOptions options;
    // Every field read counts against this limit, so it must exceed the message size: 8x
    // leaves room for the codec's reads while still stopping pointer-amplification tricks.
    options.traversalLimitInWords = words.size() * 8 + 1024;
    options.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end())
      return make_error(errc::malformed_message, "trailing bytes after the message");
    decode_budget budget{limits};
    return read(reader.getRoot<Root>(), budget);
  } catch (const kj::Exception& e) {
    return make_error(errc::malformed_message, e.getDescription().cStr());
  }
}

// Which tensors' values the hot messages (pull replies, pushes) reference where they are
// instead of copying them into a zeroed first segment. `Tensors`: dense_tensor or dense_view.
template <class Tensors>
std::vector<bool> referenced(const Tensors& tensors, dtype storage) {
  std::vector<bool> out(tensors.size(), false);
  unsigned left = detail::max_referenced;
  for (size_t i = 0; i < tensors.size() && left > 0; ++i)
    if (detail::referenceable(tensors[i].values, storage)) out[i] = true, --left;
  return out;
}

// A first segment big enough for the tensor payload avoids growing the message repeatedly;
// values that are referenced (`skip`) take no room in it.
template <class Tensors>
unsigned first_segment_words(const Tensors& tensors, dtype storage,
                             const std::vector<bool>& skip = {}) {
  uint64_t bytes = 1024;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const bool out_of_line = i < skip.size() && skip[i];
    bytes += (out_of_line ? 0 : stored_bytes(t.values.size(), storage)) + 64 + t.name.size();
  }
  return static_cast<unsigned>(std::min<uint64_t>(bytes / 8 + 1, uint64_t{1} << 28));
}

template <class List>
caf::expected<std::vector<dense_tensor>> read_dense_list(List in, decode_budget& budget) {
  if (in.size() > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tensors");
  std::vector<dense_tensor> out;
  out.reserve(in.size());
  for (auto t : in) {
    auto x = detail::read_dense(t, budget);
    if (!x) return std::move(x.error());
    out.push_back(std::move(*x));
  }
  return out;
}

}  // namespace troupe::detail
