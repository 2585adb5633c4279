// Tensor, clock, byte-field, work-chunk and epoch conversions shared by every message of the
// codec.
#include <bit>

#include <capnp/orphan.h>
#include <cmath>
#include <cstring>

#include "kernels/cpu/half.hpp"
#include "kernels/cpu/int8_blocks.hpp"
#include "kernels/cpu/vector_ops.hpp"
#include "messages/codec_detail.hpp"

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

namespace troupe::detail {

namespace {

caf::expected<dtype> to_dtype(schema::DType type) {
  switch (type) {
    case schema::DType::F32:
      return dtype::f32;
    case schema::DType::BF16:
      return dtype::bf16;
    case schema::DType::F16:
      return dtype::f16;
    case schema::DType::I8:
      return dtype::i8;
  }
  return make_error(errc::malformed_message, "unknown dtype");
}

schema::DType to_schema(dtype type) {
  switch (type) {
    case dtype::bf16:
      return schema::DType::BF16;
    case dtype::f16:
      return schema::DType::F16;
    case dtype::i8:
      return schema::DType::I8;
    case dtype::f32:
      break;
  }
  return schema::DType::F32;
}

}  // namespace

caf::expected<framed_words> frame_words(const wire& w, const codec_limits& limits) {
  const auto bytes = bytes_of(w);
  if (bytes.empty()) return make_error(errc::malformed_message, "empty message");
  if (bytes.size() > limits.max_bytes)
    return make_error(errc::message_too_large, std::to_string(bytes.size()) + " bytes, limit " +
                                                   std::to_string(limits.max_bytes));
  if (bytes.size() % sizeof(capnp::word) != 0)
    return make_error(errc::malformed_message, "length is not a whole number of 8-byte words");
  const size_t count = bytes.size() / sizeof(capnp::word);
  framed_words out;
  // Cap'n Proto reads aligned words. Large vectors come 16-byte aligned from the allocator (and
  // a ring places payloads as their writer did), so the bytes are read where they are; only a
  // misaligned buffer is copied.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(capnp::word) == 0) {
    out.words = kj::arrayPtr(reinterpret_cast<const capnp::word*>(bytes.data()), count);
    return out;
  }
  out.copy = kj::heapArray<capnp::word>(count);
  std::memcpy(out.copy.begin(), bytes.data(), bytes.size());
  out.words = out.copy.asPtr();
  return out;
}

namespace {

// Appends what Cap'n Proto writes to a std::vector<char>, so a message is copied once.
class vector_output : public kj::OutputStream {
 public:
  explicit vector_output(wire_bytes& out) : out_(out) {}
  void write(const void* buffer, size_t size) override {
    const char* bytes = static_cast<const char*>(buffer);
    out_.insert(out_.end(), bytes, bytes + size);
  }

 private:
  wire_bytes& out_;
};

}  // namespace

wire to_wire(capnp::MessageBuilder& message) {
  wire w;
  w.bytes.reserve(capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word));
  vector_output out{w.bytes};
  capnp::writeMessage(out, message);
  return w;
}

wire_builder::wire_builder(size_t first_segment_words) : first_words_(first_segment_words) {
  // Zeroed, as Cap'n Proto requires of the memory it builds in (a wire's bytes are not).
  out_.bytes.resize(sizeof(capnp::word) * (1 + first_words_));
  std::memset(out_.bytes.data(), 0, out_.bytes.size());
}

kj::ArrayPtr<capnp::word> wire_builder::allocateSegment(unsigned minimum_words) {
  if (!first_given_ && minimum_words <= first_words_) {
    first_given_ = true;
    auto* words = reinterpret_cast<capnp::word*>(out_.bytes.data()) + 1;
    return kj::arrayPtr(words, first_words_);
  }
  first_given_ = true;
  more_.push_back(kj::heapArray<capnp::word>(std::max<size_t>(minimum_words, first_words_)));
  std::memset(more_.back().begin(), 0, more_.back().size() * sizeof(capnp::word));
  return more_.back().asPtr();
}

wire wire_builder::finish() {
  const auto segments = getSegmentsForOutput();
  const auto* first = reinterpret_cast<const capnp::word*>(out_.bytes.data()) + 1;
  if (segments.size() != 1 || segments[0].begin() != first) return to_wire(*this);
  // One segment in the wire's own buffer: the segment table is (count - 1 = 0, its words).
  const uint32_t table[2] = {0, static_cast<uint32_t>(segments[0].size())};
  std::memcpy(out_.bytes.data(), table, sizeof table);
  out_.bytes.resize(sizeof(capnp::word) * (1 + segments[0].size()));
  return std::move(out_);
}

size_t wire_builder::write_parts(const std::function<void(byte_parts)>& write) {
  const auto segments = getSegmentsForOutput();
  // Cap'n Proto's framing: the count less one, each segment's words, padded to a whole word.
  std::vector<uint32_t> table((segments.size() + 2) & ~size_t{1}, 0);
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  std::vector<std::span<const char>> parts{
      {reinterpret_cast<const char*>(table.data()), table.size() * sizeof(uint32_t)}};
  size_t total = parts[0].size();
  for (size_t i = 0; i < segments.size(); ++i) {
    table[i + 1] = static_cast<uint32_t>(segments[i].size());
    parts.emplace_back(reinterpret_cast<const char*>(segments[i].begin()),
                       segments[i].size() * sizeof(capnp::word));
    total += parts.back().size();
  }
  write(parts);
  return total;
}

}  // namespace troupe::detail

namespace troupe {

unwritten_bytes::unwritten_bytes(std::unique_ptr<detail::wire_builder> message)
    : message_(std::move(message)),
      size_(capnp::computeSerializedSizeInWords(*message_) * sizeof(capnp::word)) {}

unwritten_bytes::~unwritten_bytes() = default;

void unwritten_bytes::write_to(const std::function<void(byte_parts)>& write) const {
  message_->write_parts(write);
}

wire_bytes unwritten_bytes::gathered() const {
  wire_bytes out;
  out.reserve(size_);
  write_to([&](byte_parts parts) {
    for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  });
  return out;
}

wire encoded(const wire& w) {
  if (w.borrowed) return wire{wire_bytes(w.borrowed->bytes.begin(), w.borrowed->bytes.end())};
  if (w.unwritten) return wire{w.unwritten->gathered()};
  if (!w.local) return w;
  return std::visit([](const auto& x) { return encode(x); }, *w.local);
}

}  // namespace troupe

namespace troupe::detail {

caf::expected<std::string> read_text(capnp::Text::Reader text, const decode_budget& budget,
                                     const char* what) {
  if (text.size() > budget.limits.max_text)
    return make_error(errc::message_too_large, std::string{what} + " is too long");
  return std::string{text.cStr(), text.size()};
}

void write_shape(capnp::List<uint32_t>::Builder out, const std::vector<uint32_t>& shape) {
  for (unsigned i = 0; i < shape.size(); ++i) out.set(i, shape[i]);
}

caf::expected<std::vector<uint32_t>> read_shape(capnp::List<uint32_t>::Reader in,
                                                decode_budget& budget, uint64_t most) {
  if (in.size() > budget.limits.max_dims)
    return make_error(errc::message_too_large, "too many dimensions");
  if (most == 0) most = budget.limits.max_elements;
  std::vector<uint32_t> shape = to_vector<uint32_t>(in);
  uint64_t count = 1;
  for (uint32_t d : shape) {
    count *= d;
    if (count > most) return make_error(errc::message_too_large, "tensor has too many elements");
  }
  return shape;
}

void write_values(capnp::Data::Builder out, std::span<const float> values, dtype storage) {
  switch (storage) {
    case dtype::f32:
      if (!values.empty())  // memcpy from an empty span's null data is undefined
        std::memcpy(out.begin(), values.data(), values.size() * sizeof(float));
      return;
    case dtype::bf16:
    case dtype::f16:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t v = storage == dtype::bf16 ? kernels::float_to_bf16(values[i])
                                                  : kernels::float_to_half(values[i]);
        std::memcpy(out.begin() + 2 * i, &v, sizeof v);
      }
      return;
    case dtype::i8: {  // the block scales, then a byte per value
      const size_t blocks = kernels::int8_blocks(values.size());
      std::vector<float> scales(blocks);
      const std::span<int8_t> q{reinterpret_cast<int8_t*>(out.begin() + blocks * sizeof(float)),
                                values.size()};
      kernels::int8_quantize(values, q, scales);
      if (blocks) std::memcpy(out.begin(), scales.data(), blocks * sizeof(float));
      return;
    }
  }
}

namespace {

// The storage of `count` values in `data`, once the budget and the byte size allow them.
caf::expected<dtype> checked_storage(capnp::Data::Reader data, schema::DType type, uint64_t count,
                                     decode_budget& budget, const std::string& what) {
  auto storage = to_dtype(type);
  if (!storage) return std::move(storage.error());
  budget.elements += count;
  if (budget.elements > budget.limits.max_elements)
    return make_error(errc::message_too_large, "too many tensor elements in one message");
  if (data.size() != stored_bytes(count, *storage))
    return make_error(errc::shape_mismatch, what + ": " + std::to_string(data.size()) +
                                                " bytes for " + std::to_string(count) +
                                                " elements");
  return storage;
}

// Copies f32 values in blocks that stay in L1 for the finiteness check; false at the first
// block that holds a non-finite value (when the limits ask for finite values).
bool copy_checked(const float* in, float* out, uint64_t count, const codec_limits& limits) {
  constexpr uint64_t block = 4096;
  for (uint64_t first = 0; first < count; first += block) {
    const uint64_t n = std::min(block, count - first);
    std::memcpy(out + first, in + first, n * sizeof(float));
    if (limits.require_finite && !kernels::all_finite({out + first, n})) return false;
  }
  return true;
}

void widen(capnp::Data::Reader data, dtype storage, std::span<float> out) {
  if (storage == dtype::i8) {
    const size_t blocks = kernels::int8_blocks(out.size());
    std::vector<float> scales(blocks);
    if (blocks) std::memcpy(scales.data(), data.begin(), blocks * sizeof(float));
    const std::span<const int8_t> q{
        reinterpret_cast<const int8_t*>(data.begin() + blocks * sizeof(float)), out.size()};
    return kernels::int8_dequantize(q, scales, out);
  }
  for (uint64_t i = 0; i < out.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, data.begin() + 2 * i, sizeof v);
    out[i] = storage == dtype::bf16 ? kernels::bf16_to_float(v) : kernels::half_to_float(v);
  }
}

// errc::non_finite naming the first element of `values` that is not finite.
caf::error first_non_finite(std::span<const float> values, const std::string& what) {
  for (uint64_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      return make_error(errc::non_finite, what + ": element " + std::to_string(i));
  return make_error(errc::non_finite, what);
}

}  // namespace

caf::expected<std::vector<float>> read_values(capnp::Data::Reader data, schema::DType type,
                                              uint64_t count, decode_budget& budget,
                                              const std::string& what) {
  auto storage = checked_storage(data, type, count, budget, what);
  if (!storage) return std::move(storage.error());
  std::vector<float> values;
  bool finite = true;
  if (*storage == dtype::f32) {
    // Copied block by block into memory that is not cleared first. (Cap'n Proto data starts on
    // a word boundary of the aligned message, so the bytes may be read as floats.)
    const auto* in = reinterpret_cast<const float*>(data.begin());
    values.reserve(count);
    constexpr uint64_t block = 4096;
    for (uint64_t first = 0; first < count && finite; first += block) {
      const uint64_t n = std::min(block, count - first);
      values.insert(values.end(), in + first, in + first + n);
      finite = !budget.limits.require_finite || kernels::all_finite({values.data() + first, n});
    }
  } else {
    values.resize(count);
    widen(data, *storage, values);
    finite = !budget.limits.require_finite || kernels::all_finite(values);
  }
  if (!finite) return first_non_finite(values, what);
  return values;
}

caf::error read_values_into(capnp::Data::Reader data, schema::DType type, std::span<float> out,
                            decode_budget& budget, const std::string& what) {
  auto storage = checked_storage(data, type, out.size(), budget, what);
  if (!storage) return std::move(storage.error());
  bool finite = true;
  if (*storage == dtype::f32) {
    finite = copy_checked(reinterpret_cast<const float*>(data.begin()), out.data(), out.size(),
                          budget.limits);
  } else {
    widen(data, *storage, out);
    finite = !budget.limits.require_finite || kernels::all_finite(out);
  }
  if (!finite) return first_non_finite(out, what);
  return {};
}

caf::expected<std::optional<std::span<const float>>> view_values(capnp::Data::Reader data,
                                                                 schema::DType type, uint64_t count,
                                                                 decode_budget& budget,
                                                                 const std::string& what) {
  using view = std::optional<std::span<const float>>;
  auto storage = checked_storage(data, type, count, budget, what);
  if (!storage) return std::move(storage.error());
  if (*storage != dtype::f32 || reinterpret_cast<uintptr_t>(data.begin()) % alignof(float) != 0)
    return view{};
  const std::span<const float> values{reinterpret_cast<const float*>(data.begin()), count};
  if (budget.limits.require_finite && !kernels::all_finite(values))
    return first_non_finite(values, what);
  return view{values};
}

bool referenceable(std::span<const float> values, dtype storage) {
  const size_t bytes = values.size() * sizeof(float);
  return storage == dtype::f32 && bytes >= (size_t{64} << 10) && bytes % sizeof(capnp::word) == 0 &&
         reinterpret_cast<uintptr_t>(values.data()) % alignof(capnp::word) == 0;
}

void write_dense(schema::DenseTensor::Builder out, const dense_view& x, dtype storage,
                 bool reference) {
  out.setName(x.name);
  write_shape(out.initShape(x.shape.size()), x.shape);
  out.setRowOffset(x.row_offset);
  out.setDtype(to_schema(storage));
  if (reference && referenceable(x.values, storage)) {
    const capnp::Data::Reader blob{reinterpret_cast<const kj::byte*>(x.values.data()),
                                   x.values.size() * sizeof(float)};
    out.adoptData(capnp::Orphanage::getForMessageContaining(out).referenceExternalData(blob));
    return;
  }
  write_values(out.initData(stored_bytes(x.values.size(), storage)), x.values, storage);
}

void write_dense(schema::DenseTensor::Builder out, const dense_tensor& x, dtype storage,
                 bool reference) {
  write_dense(out, dense_view{x.name, x.shape, x.row_offset, x.values}, storage, reference);
}

caf::expected<dense_tensor> read_dense_header(schema::DenseTensor::Reader in, decode_budget& budget,
                                              uint64_t most) {
  if (++budget.tensors > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tensors");
  auto name = read_text(in.getName(), budget, "tensor name");
  if (!name) return std::move(name.error());
  dense_tensor x;
  x.name = std::move(*name);
  auto shape = read_shape(in.getShape(), budget, most);
  if (!shape) return std::move(shape.error());
  x.shape = std::move(*shape);
  x.row_offset = in.getRowOffset();
  return x;
}

caf::expected<dense_tensor> read_dense_shape_only(schema::DenseTensor::Reader in,
                                                  decode_budget& budget, uint64_t& declared) {
  if (in.getData().size() != 0)
    return make_error(errc::malformed_message, "a saved slice's shape came with values");
  if (declared >= budget.limits.max_declared_values)
    return make_error(errc::message_too_large, "a saved spec's shapes declare too many values");
  auto x = read_dense_header(in, budget, budget.limits.max_declared_values - declared);
  if (!x) return x;
  declared += numel(x->shape);
  return x;
}

caf::expected<dense_tensor> read_dense(schema::DenseTensor::Reader in, decode_budget& budget) {
  auto x = read_dense_header(in, budget);
  if (!x) return x;
  auto values = read_values(in.getData(), in.getDtype(), numel(x->shape), budget, x->name);
  if (!values) return std::move(values.error());
  x->values = std::move(*values);
  return x;
}

void write_sparse(schema::SparseRows::Builder out, const sparse_rows& x, dtype storage) {
  out.setName(x.name);
  out.setRowDim(x.row_dim);
  auto ids = out.initIds(x.ids.size());
  for (unsigned i = 0; i < x.ids.size(); ++i) ids.set(i, x.ids[i]);
  out.setDtype(to_schema(storage));
  write_values(out.initData(stored_bytes(x.values.size(), storage)), x.values, storage);
}

caf::expected<sparse_rows> read_sparse(schema::SparseRows::Reader in, decode_budget& budget) {
  if (++budget.tensors > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tensors");
  auto name = read_text(in.getName(), budget, "tensor name");
  if (!name) return std::move(name.error());
  sparse_rows x;
  x.name = std::move(*name);
  x.row_dim = in.getRowDim();
  auto ids = in.getIds();
  if (ids.size() > budget.limits.max_list)
    return make_error(errc::message_too_large, x.name + ": too many rows");
  x.ids = to_vector<uint64_t>(ids);
  const uint64_t count = uint64_t{x.row_dim} * x.ids.size();
  if (count > budget.limits.max_elements)
    return make_error(errc::message_too_large, x.name + ": too many elements");
  auto values = read_values(in.getData(), in.getDtype(), count, budget, x.name);
  if (!values) return std::move(values.error());
  x.values = std::move(*values);
  return x;
}

void write_sign(schema::SignTensor::Builder out, const sign_tensor& x) {
  out.setName(x.name);
  write_shape(out.initShape(x.shape.size()), x.shape);
  out.setRowOffset(x.row_offset);
  out.setScale(x.scale);
  write_bytes(out.initBits(x.bits.size()), x.bits);
}

caf::expected<sign_tensor> read_sign(schema::SignTensor::Reader in, decode_budget& budget) {
  if (++budget.tensors > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tensors");
  auto name = read_text(in.getName(), budget, "tensor name");
  if (!name) return std::move(name.error());
  sign_tensor x;
  x.name = std::move(*name);
  auto shape = read_shape(in.getShape(), budget);
  if (!shape) return std::move(shape.error());
  x.shape = std::move(*shape);
  x.row_offset = in.getRowOffset();
  x.scale = in.getScale();
  if (budget.limits.require_finite && !std::isfinite(x.scale))
    return make_error(errc::non_finite, x.name + ": scale");
  const uint64_t count = numel(x.shape);
  budget.elements += count;
  if (budget.elements > budget.limits.max_elements)
    return make_error(errc::message_too_large, "too many tensor elements in one message");
  const auto bits = in.getBits();
  if (bits.size() != (count + 7) / 8)
    return make_error(errc::shape_mismatch, x.name + ": sign bits do not match the shape");
  x.bits.assign(bits.begin(), bits.end());
  return x;
}

void write_clock(schema::VectorClock::Builder out, const vector_clock& clock) {
  auto entries = out.initEntries(clock.size());
  for (unsigned i = 0; i < clock.size(); ++i) entries.set(i, clock.at(i));
}

caf::expected<vector_clock> read_clock(schema::VectorClock::Reader in,
                                       const decode_budget& budget) {
  auto entries = in.getEntries();
  if (entries.size() > budget.limits.max_clock_entries)
    return make_error(errc::message_too_large, "vector clock has too many entries");
  return vector_clock{to_vector<uint64_t>(entries)};
}

void write_bytes(capnp::Data::Builder out, const std::vector<uint8_t>& bytes) {
  if (!bytes.empty()) std::memcpy(out.begin(), bytes.data(), bytes.size());
}

caf::expected<std::vector<uint8_t>> read_bytes(capnp::Data::Reader in, size_t max,
                                               const char* what) {
  if (in.size() > max) return make_error(errc::message_too_large, std::string{what} + " too long");
  return std::vector<uint8_t>(in.begin(), in.end());
}

void write_chunk(schema::WorkChunk::Builder out, const work_chunk& x) {
  out.setEpoch(x.epoch);
  out.setFirst(x.first);
  out.setCount(x.count);
}

work_chunk read_chunk(schema::WorkChunk::Reader in) {
  return work_chunk{in.getEpoch(), in.getFirst(), in.getCount()};
}

void write_chunks(capnp::List<schema::WorkChunk>::Builder out, const std::vector<work_chunk>& in) {
  for (unsigned i = 0; i < in.size(); ++i) write_chunk(out[i], in[i]);
}

caf::expected<std::vector<work_chunk>> read_chunks(capnp::List<schema::WorkChunk>::Reader in,
                                                   const decode_budget& budget) {
  if (in.size() > budget.limits.max_list)
    return make_error(errc::message_too_large, "too many chunks");
  std::vector<work_chunk> out;
  for (auto c : in) {
    out.push_back(read_chunk(c));
    if (out.back().count == 0) return make_error(errc::malformed_message, "a chunk of no batches");
  }
  return out;
}

void write_epochs(capnp::List<schema::EpochEntry>::Builder out,
                  const std::vector<epoch_entry>& epochs) {
  for (unsigned i = 0; i < epochs.size(); ++i) {
    out[i].setEpoch(epochs[i].epoch);
    out[i].setTestAccuracy(epochs[i].test_accuracy);
    out[i].setTestLoss(epochs[i].test_loss);
    out[i].setTrainLoss(epochs[i].train_loss);
    out[i].setWallS(epochs[i].wall_s);
  }
}

std::vector<epoch_entry> read_epochs(capnp::List<schema::EpochEntry>::Reader in) {
  std::vector<epoch_entry> out;
  for (auto e : in)
    out.push_back(epoch_entry{e.getEpoch(), e.getTestAccuracy(), e.getTestLoss(), e.getTrainLoss(),
                              e.getWallS()});
  return out;
}

}  // namespace troupe::detail
