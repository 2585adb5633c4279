#include "actors/dp/trainer/piece_checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// A record's bytes: this tag, moment (u32), version, offset, count (u64 each), then the
// values (little-endian fp32, as every machine this runs on stores them).
constexpr char record_tag[8] = {'T', 'R', 'P', 'I', 'E', 'C', 'E', '1'};
constexpr size_t head_bytes = sizeof record_tag + 4 + 3 * 8;

template <class T>
void put(char*& at, T x) {
  std::memcpy(at, &x, sizeof x);
  at += sizeof x;
}

template <class T>
T get(const char*& at) {
  T x;
  std::memcpy(&x, at, sizeof x);
  at += sizeof x;
  return x;
}

}  // namespace

wire encode_piece_record(uint64_t version, uint64_t offset, uint32_t moment,
                         std::span<const float> values) {
  wire w{wire_bytes(head_bytes + values.size_bytes())};
  char* at = w.bytes.data();
  std::memcpy(at, record_tag, sizeof record_tag);
  at += sizeof record_tag;
  put(at, moment);
  put(at, version);
  put(at, offset);
  put(at, uint64_t{values.size()});
  if (!values.empty()) std::memcpy(at, values.data(), values.size_bytes());
  return w;
}

caf::expected<piece_record> decode_piece_record(const wire& w) {
  const auto bytes = bytes_of(w);
  auto malformed = [](const char* why) {
    return make_error(errc::malformed_message, std::string("a piece record: ") + why);
  };
  if (bytes.size() < head_bytes || std::memcmp(bytes.data(), record_tag, sizeof record_tag) != 0)
    return malformed("no record's head");
  const char* at = bytes.data() + sizeof record_tag;
  piece_record out;
  out.moment = get<uint32_t>(at);
  out.version = get<uint64_t>(at);
  out.offset = get<uint64_t>(at);
  const auto count = get<uint64_t>(at);
  if (out.moment > 1) return malformed("a moment other than 0 and 1");
  if (count > piece_record_values || bytes.size() != head_bytes + count * sizeof(float))
    return malformed("its values are not its length");
  if (reinterpret_cast<uintptr_t>(at) % alignof(float) != 0) return malformed("misaligned");
  out.values = std::span<const float>(reinterpret_cast<const float*>(at), count);
  return out;
}

std::vector<std::function<wire()>> piece_save_plan(std::shared_ptr<const held_pieces> own,
                                                   uint64_t version) {
  std::vector<std::function<wire()>> plan;
  for (uint32_t moment = 0; moment < 2; ++moment) {
    const auto& all = moment == 0 ? own->m : own->v;
    if (all.empty()) continue;
    for (const auto& p : own->pieces)
      for (uint64_t first = 0; first < p.count; first += piece_record_values) {
        const uint64_t n = std::min(piece_record_values, p.count - first);
        plan.push_back([=] {
          const auto& values = moment == 0 ? own->m : own->v;
          return encode_piece_record(version, p.offset + first, moment,
                                     std::span<const float>(values).subspan(p.at + first, n));
        });
      }
  }
  if (plan.empty()) plan.push_back([=] { return encode_piece_record(version, 0, 0, {}); });
  return plan;
}

piece_restorer::piece_restorer(piece_cut cut, std::vector<held_pieces> held, unsigned moments)
    : moments_(moments) {
  out_.cut = cut;
  out_.held = std::move(held);
}

caf::error piece_restorer::add(const wire& w) {
  auto record = decode_piece_record(w);
  if (!record) return std::move(record.error());
  if (record->values.empty()) return {};  // (a member whose optimizer keeps no moments)
  if (versioned_ && record->version != out_.version)
    return make_error(errc::corrupt_data, "the checkpoint's pieces are of different steps");
  if (record->moment >= moments_)
    return make_error(errc::corrupt_data,
                      "the checkpoint's pieces hold moments this optimizer does not keep "
                      "(saved with another --optimizer?)");
  out_.version = record->version;
  versioned_ = true;
  filled_ += copy_overlaps(record->offset, record->values, out_.held, record->moment == 1);
  return {};
}

caf::expected<restored_pieces> piece_restorer::finish() && {
  uint64_t wanted = 0;
  for (const auto& h : out_.held) wanted += h.total * moments_;
  if (filled_ != wanted)
    return make_error(errc::corrupt_data,
                      fmt::format("the checkpoint's pieces fill {} of the {} moment values this "
                                  "member holds",
                                  filled_, wanted));
  return std::move(out_);
}

}  // namespace troupe
