// Codec for pushes: encoded from a gradient where it is (into one buffer, or in parts onto a
// socket), decoded by copy or in place (a bucket applying the gradient where it came).
#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;
using detail::first_segment_words;
using detail::read_dense_list;
using detail::referenced;

wire encode(const push_request& x, const encode_options& opts) {
  std::vector<dense_view> dense;
  dense.reserve(x.dense.size());
  for (const auto& t : x.dense)
    dense.push_back(dense_view{t.name, t.shape, t.row_offset, t.values});
  return encode(x, dense, opts);
}

namespace {

void write_push(schema::PushRequest::Builder out, const push_request& x,
                const std::vector<dense_view>& dense, const encode_options& opts,
                const std::vector<bool>& by_reference) {
  out.setBucket(x.bucket);
  out.setWorker(x.worker);
  out.setWorkerClock(x.worker_clock);
  detail::write_clock(out.initReadClock(), x.read_clock);
  auto list = out.initDense(dense.size());
  for (unsigned i = 0; i < dense.size(); ++i)
    detail::write_dense(list[i], dense[i], opts.storage, by_reference[i]);
  auto sparse = out.initSparse(x.sparse.size());
  for (unsigned i = 0; i < x.sparse.size(); ++i)
    detail::write_sparse(sparse[i], x.sparse[i], opts.storage);
  auto signs = out.initSigns(x.signs.size());
  for (unsigned i = 0; i < x.signs.size(); ++i) detail::write_sign(signs[i], x.signs[i]);
  out.setLast(x.last);
  out.setSkipped(x.skipped);
  out.setResend(x.resend);
  if (x.batches) detail::write_chunk(out.initBatches(), *x.batches);
}

}  // namespace

wire encode(const push_request& x, const std::vector<dense_view>& dense,
            const encode_options& opts) {
  const auto by_reference = referenced(dense, opts.storage);
  detail::wire_builder message(first_segment_words(dense, opts.storage, by_reference));
  write_push(message.initRoot<schema::PushRequest>(), x, dense, opts, by_reference);
  return message.finish();
}

size_t encode_to(const push_request& x, const std::vector<dense_view>& dense,
                 const std::function<void(byte_parts)>& write, const encode_options& opts) {
  const auto by_reference = referenced(dense, opts.storage);
  detail::wire_builder message(first_segment_words(dense, opts.storage, by_reference));
  write_push(message.initRoot<schema::PushRequest>(), x, dense, opts, by_reference);
  return message.write_parts(write);
}

namespace {

// A push's fields, its dense tensors read by read_dense(list, budget, x) -> caf::error.
template <class ReadDense>
caf::expected<push_request> read_push(schema::PushRequest::Reader in, decode_budget& budget,
                                      ReadDense&& read_dense) {
  push_request x;
  x.bucket = in.getBucket();
  x.worker = in.getWorker();
  x.worker_clock = in.getWorkerClock();
  x.last = in.getLast();
  x.skipped = in.getSkipped();
  x.resend = in.getResend();
  if (in.hasBatches()) {
    x.batches = detail::read_chunk(in.getBatches());
    if (x.batches->count == 0 || x.batches->first >= detail::max_batch_index)
      return make_error(errc::malformed_message, "a push's batches are out of range");
  }
  auto clock = detail::read_clock(in.getReadClock(), budget);
  if (!clock) return std::move(clock.error());
  x.read_clock = std::move(*clock);
  if (auto err = read_dense(in.getDense(), budget, x)) return err;
  const auto sparse = in.getSparse();
  const auto signs = in.getSigns();
  if (sparse.size() + signs.size() > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tensors");
  for (auto s : sparse) {
    auto rows = detail::read_sparse(s, budget);
    if (!rows) return std::move(rows.error());
    x.sparse.push_back(std::move(*rows));
  }
  for (auto s : signs) {
    auto sign = detail::read_sign(s, budget);
    if (!sign) return std::move(sign.error());
    x.signs.push_back(std::move(*sign));
  }
  return x;
}

}  // namespace

template <>
caf::expected<push_request> decode<push_request>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::PushRequest, push_request>(
      w, limits, [](schema::PushRequest::Reader in, decode_budget& budget) {
        return read_push(in, budget, [](auto list, decode_budget& b, push_request& x) {
          auto dense = read_dense_list(list, b);
          if (!dense) return std::move(dense.error());
          x.dense = std::move(*dense);
          return caf::error{};
        });
      });
}

caf::expected<push_request> decode_push_in_place(const wire& w, const codec_limits& limits,
                                                 std::vector<std::span<const float>>& views) {
  views.clear();
  if (w.local) {
    auto copy = decode<push_request>(w, limits);
    if (copy)
      for (const auto& t : copy->dense) views.emplace_back(t.values);
    return copy;
  }
  // A view must lie in w's own bytes (read_root reads a misaligned message from a copy).
  const auto bytes = bytes_of(w);
  auto inside = [&](std::span<const float> v) {
    const auto* p = reinterpret_cast<const char*>(v.data());
    return v.empty() || (p >= bytes.data() && p + v.size_bytes() <= bytes.data() + bytes.size());
  };
  auto decoded = detail::read_root<schema::PushRequest, push_request>(
      w, limits, [&](schema::PushRequest::Reader in, decode_budget& budget) {
        return read_push(in, budget, [&](auto list, decode_budget& b, push_request& x) {
          if (list.size() > b.limits.max_tensors)
            return make_error(errc::message_too_large, "too many tensors");
          for (auto t : list) {
            auto header = detail::read_dense_header(t, b);
            if (!header) return std::move(header.error());
            const uint64_t count = numel(header->shape);
            auto view = detail::view_values(t.getData(), t.getDtype(), count, b, header->name);
            if (!view) return std::move(view.error());
            const bool in_place = *view && inside(**view);
            if (!in_place) {
              b.elements -= count;  // counted again by the copy
              auto values = detail::read_values(t.getData(), t.getDtype(), count, b, header->name);
              if (!values) return std::move(values.error());
              header->values = std::move(*values);
            }
            x.dense.push_back(std::move(*header));
            // (A copy's buffer stays where it is when x.dense grows: its vector only moves.)
            views.push_back(in_place ? **view : std::span<const float>{x.dense.back().values});
          }
          return caf::error{};
        });
      });
  if (!decoded) views.clear();  // they would point into a push that is gone
  return decoded;
}

}  // namespace troupe
