// Codec for data-parallel groups (--mode dp): a generation's start, step reports, and the
// entries of a group's rendezvous store.
#include <cmath>
#include <cstring>

#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;

wire encode(const group_start& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::GroupStart>();
  out.setRank(x.rank);
  out.setSize(x.size);
  out.setGeneration(x.generation);
  out.setToken(x.token);
  out.setEpochs(x.epochs);
  out.setGlobalBatch(x.global_batch);
  out.setSeed(x.seed);
  detail::write_optimizer(out.initOptimizer(), x.optimizer);
  out.setBucketBytes(x.bucket_bytes);
  out.setOverlap(x.overlap);
  out.setChecksumEvery(x.checksum_every);
  out.setCollective(static_cast<schema::GroupStart::Collective>(x.collective));
  out.setTimeoutMs(x.timeout_ms);
  auto hosts = out.initHosts(static_cast<unsigned>(x.hosts.size()));
  for (unsigned i = 0; i < x.hosts.size(); ++i) hosts.set(i, x.hosts[i]);
  out.setTwoLevel(x.two_level);
  out.setCheckpointEvery(x.checkpoint_every);
  out.setGroupKey(x.group_key);
  auto c = out.initCompression();
  c.setDtype(static_cast<schema::DpCompression::Dtype>(x.compression.dtype));
  auto skip = c.initSkip(static_cast<unsigned>(x.compression.skip.size()));
  for (unsigned i = 0; i < x.compression.skip.size(); ++i) skip.set(i, x.compression.skip[i]);
  c.setAdam(static_cast<schema::DpCompression::Adam>(x.compression.adam));
  c.setFreezeStep(x.compression.freeze_step);
  c.setVarFreezeStep(x.compression.var_freeze_step);
  c.setVarUpdateScaler(x.compression.var_update_scaler);
  c.setLocalStepScaler(x.compression.local_step_scaler);
  c.setLocalStepClipper(x.compression.local_step_clipper);
  out.setAccumulate(x.accumulate);
  out.setBalance(x.balance);
  out.setSlowdown(x.slowdown);
  out.setClient(x.client);
  out.setDelayMs(x.delay_ms);
  out.setZeroStage(x.zero_stage);
  out.setShardBackups(x.shard_backups);
  return detail::to_wire(message);
}

namespace {

caf::expected<dp_compression> read_compression(schema::DpCompression::Reader in,
                                               decode_budget& budget) {
  dp_compression x;
  const auto dtype = static_cast<uint16_t>(in.getDtype());
  const auto adam = static_cast<uint16_t>(in.getAdam());
  if (dtype > static_cast<uint16_t>(comm_dtype::fp16) ||
      adam > static_cast<uint16_t>(compressed_adam::zero_one))
    return make_error(errc::malformed_message, "group start: unknown compression");
  x.dtype = static_cast<comm_dtype>(dtype);
  x.adam = static_cast<compressed_adam>(adam);
  if (in.getSkip().size() > 4096)
    return make_error(errc::malformed_message, "group start: too many tensors kept at fp32");
  for (auto name : in.getSkip()) {
    auto text = detail::read_text(name, budget, "tensor name");
    if (!text) return std::move(text.error());
    x.skip.push_back(std::move(*text));
  }
  x.freeze_step = in.getFreezeStep();
  x.var_freeze_step = in.getVarFreezeStep();
  x.var_update_scaler = in.getVarUpdateScaler();
  x.local_step_scaler = in.getLocalStepScaler();
  x.local_step_clipper = in.getLocalStepClipper();
  if (x.var_update_scaler == 0 || x.local_step_scaler == 0 || x.local_step_clipper == 0)
    return make_error(errc::malformed_message, "group start: a 0/1 Adam schedule of zero");
  return x;
}

}  // namespace

template <>
caf::expected<group_start> decode<group_start>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::GroupStart, group_start>(
      w, limits,
      [](schema::GroupStart::Reader in, decode_budget& budget) -> caf::expected<group_start> {
        group_start x;
        x.rank = in.getRank();
        x.size = in.getSize();
        if (x.size == 0 || x.rank >= x.size || x.size > (1u << 16))
          return make_error(errc::malformed_message, "group start: rank outside the group");
        x.generation = in.getGeneration();
        x.token = in.getToken();
        x.epochs = in.getEpochs();
        x.global_batch = in.getGlobalBatch();
        if (x.epochs == 0 || x.global_batch < x.size)
          return make_error(errc::malformed_message,
                            "group start: no epochs, or fewer examples per step than members");
        x.seed = in.getSeed();
        auto opt = detail::read_optimizer(in.getOptimizer(), budget);
        if (!opt) return std::move(opt.error());
        x.optimizer = *opt;
        x.bucket_bytes = in.getBucketBytes();
        if (x.bucket_bytes < 4 || x.bucket_bytes > (uint64_t{1} << 30))
          return make_error(errc::malformed_message, "group start: bucket cap out of range");
        x.overlap = in.getOverlap();
        x.checksum_every = in.getChecksumEvery();
        const auto collective = static_cast<uint16_t>(in.getCollective());
        if (collective > static_cast<uint16_t>(collective_kind::nccl))
          return make_error(errc::malformed_message, "group start: unknown collective");
        x.collective = static_cast<collective_kind>(collective);
        x.timeout_ms = in.getTimeoutMs();
        if (x.timeout_ms == 0 || x.timeout_ms > 3'600'000)
          return make_error(errc::malformed_message, "group start: timeout out of range");
        if (in.getHosts().size() != x.size)
          return make_error(errc::malformed_message, "group start: a host label per member");
        for (auto label : in.getHosts()) {
          auto text = detail::read_text(label, budget, "host label");
          if (!text) return std::move(text.error());
          x.hosts.push_back(std::move(*text));
        }
        x.two_level = in.getTwoLevel();
        x.checkpoint_every = in.getCheckpointEvery();
        x.group_key = in.getGroupKey();
        auto compression = read_compression(in.getCompression(), budget);
        if (!compression) return std::move(compression.error());
        x.compression = std::move(*compression);
        x.accumulate = in.getAccumulate();
        x.balance = in.getBalance();
        x.slowdown = in.getSlowdown();
        x.client = in.getClient();
        x.delay_ms = in.getDelayMs();
        x.zero_stage = in.getZeroStage();
        x.shard_backups = in.getShardBackups();
        if (x.accumulate == 0 || x.accumulate > 65536 || !(x.slowdown >= 1) || x.slowdown > 1000 ||
            x.delay_ms > 60000 || x.zero_stage > 2 || x.shard_backups > 65536)
          return make_error(
              errc::malformed_message,
              "group start: accumulation, slowdown, delay or ZeRO stage out of range");
        return x;
      });
}

wire encode(const step_report& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::StepReport>();
  out.setRank(x.rank);
  out.setGeneration(x.generation);
  out.setEpoch(x.epoch);
  out.setStep(x.step);
  out.setLossSum(x.loss_sum);
  out.setExamples(x.examples);
  out.setSkipped(x.skipped);
  out.setAllreduceS(x.allreduce_s);
  out.setExposedS(x.exposed_s);
  out.setBytes(x.bytes);
  out.setComputeS(x.compute_s);
  out.setWallS(x.wall_s);
  out.setChecksum(x.checksum);
  out.setStepExamples(x.step_examples);
  out.setBytesInterHost(x.bytes_inter_host);
  out.setCompressed(x.compressed);
  out.setOwnNonFinite(x.own_non_finite);
  return detail::to_wire(message);
}

template <>
caf::expected<step_report> decode<step_report>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::StepReport, step_report>(
      w, limits, [](schema::StepReport::Reader in, decode_budget&) -> caf::expected<step_report> {
        step_report x{in.getRank(),     in.getGeneration(),   in.getEpoch(),
                      in.getStep(),     in.getLossSum(),      in.getExamples(),
                      in.getSkipped(),  in.getAllreduceS(),   in.getExposedS(),
                      in.getBytes(),    in.getComputeS(),     in.getWallS(),
                      in.getChecksum(), in.getStepExamples(), in.getBytesInterHost()};
        x.compressed = in.getCompressed();
        x.own_non_finite = in.getOwnNonFinite();
        // A skipped step may carry a non-finite loss (that is why it was skipped); timings
        // must be finite and not negative.
        for (double t : {x.allreduce_s, x.exposed_s, x.compute_s, x.wall_s})
          if (!std::isfinite(t) || t < 0)
            return make_error(errc::malformed_message, "step report: bad timing");
        return x;
      });
}

wire encode(const store_entry& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::StoreEntry>();
  out.setGeneration(x.generation);
  out.setRank(x.rank);
  out.setToken(x.token);
  out.setKey(x.key);
  detail::write_bytes(out.initValue(x.value.size()), x.value);
  return detail::to_wire(message);
}

template <>
caf::expected<store_entry> decode<store_entry>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::StoreEntry, store_entry>(
      w, limits,
      [](schema::StoreEntry::Reader in, decode_budget& budget) -> caf::expected<store_entry> {
        store_entry x;
        x.generation = in.getGeneration();
        x.rank = in.getRank();
        x.token = in.getToken();
        auto key = detail::read_text(in.getKey(), budget, "store key");
        if (!key) return std::move(key.error());
        x.key = std::move(*key);
        auto value = detail::read_bytes(in.getValue(), max_store_value, "store value");
        if (!value) return std::move(value.error());
        x.value = std::move(*value);
        return x;
      });
}

wire encode(const collective_chunk& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::CollectiveChunk>();
  out.setGeneration(x.generation);
  out.setKey(x.key);
  out.setFrom(x.from);
  out.setTag(x.tag);
  out.setOffset(x.offset);
  out.setTotal(x.total);
  out.setCount(x.count);
  return detail::to_wire(message);
}

// Values travel bit for bit (a collective may move NaN, and broadcasts move state bytes);
// the receiver checks the range against the call it is in.
template <>
caf::expected<collective_chunk> decode<collective_chunk>(const wire& w,
                                                         const codec_limits& limits) {
  return detail::read_root<schema::CollectiveChunk, collective_chunk>(
      w, limits,
      [&](schema::CollectiveChunk::Reader in, decode_budget&) -> caf::expected<collective_chunk> {
        collective_chunk x{in.getGeneration(), in.getKey(),   in.getFrom(), in.getTag(),
                           in.getOffset(),     in.getTotal(), in.getCount()};
        if (x.count > limits.max_elements)
          return make_error(errc::malformed_message, "collective chunk: too many values");
        if (x.offset > x.total || x.count > x.total - x.offset)
          return make_error(errc::malformed_message, "collective chunk: values outside the part");
        return x;
      });
}

}  // namespace troupe
