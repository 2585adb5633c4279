// Codec for the parameter service: pull, ack, bucket spec and bucket statistics (pushes:
// codec_push.cpp).
#include <cmath>

#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;
using detail::first_segment_words;
using detail::read_dense_list;
using detail::referenced;

namespace {

caf::expected<consistency_config> read_consistency(schema::Consistency::Reader in) {
  const auto mode = static_cast<uint16_t>(in.getMode());
  if (mode > static_cast<uint16_t>(consistency_config::mode::bsp))
    return make_error(errc::malformed_message, "unknown consistency mode");
  return consistency_config{static_cast<consistency_config::mode>(mode), in.getBound()};
}

caf::expected<compensation_config> read_compensation(schema::Compensation::Reader in) {
  const auto kind = static_cast<uint16_t>(in.getKind());
  if (kind > static_cast<uint16_t>(compensation_config::kind::dcasgd_adaptive))
    return make_error(errc::malformed_message, "unknown delay compensation");
  if (!std::isfinite(in.getLambda()) || in.getLambda() < 0)
    return make_error(errc::non_finite, "delay compensation lambda");
  return compensation_config{static_cast<compensation_config::kind>(kind), in.getLambda()};
}

}  // namespace

namespace detail {

caf::expected<optimizer_config> read_optimizer(schema::Optimizer::Reader in,
                                               const decode_budget& budget) {
  optimizer_config x;
  const auto kind = static_cast<uint16_t>(in.getKind());
  if (kind > static_cast<uint16_t>(optimizer_config::kind::delayed_nesterov))
    return make_error(errc::malformed_message, "unknown optimizer kind");
  x.type = static_cast<optimizer_config::kind>(kind);
  auto rule = read_text(in.getRule(), budget, "update rule");
  if (!rule) return std::move(rule.error());
  if (rule->empty() == (x.type == optimizer_config::kind::app))
    return make_error(errc::malformed_message, "an app's update rule, and only it, has a name");
  x.rule = std::move(*rule);
  x.lr_staleness = in.getLrStaleness();
  x.lr = in.getLr();
  x.beta1 = in.getBeta1();
  x.beta2 = in.getBeta2();
  x.epsilon = in.getEpsilon();
  x.weight_decay = in.getWeightDecay();
  x.delay = std::max<uint32_t>(in.getDelay(), 1);
  for (float v : {x.lr, x.beta1, x.beta2, x.epsilon, x.weight_decay})
    if (!std::isfinite(v)) return make_error(errc::non_finite, "optimizer hyper-parameter");
  x.dash_block = in.getDashBlock();
  x.dash_freq = in.getDashFreq();
  x.dash_nesterov = in.getDashNesterov();
  // Version 2 writes the enums and leaves the version-1 bytes 0; a checkpoint of version 1
  // has only the bytes. Either way a value outside its enum is malformed.
  const bool legacy =
      in.getLegacyDashSolver() || in.getLegacyDashStorage() || in.getLegacyDashScaling();
  const auto solver = legacy ? in.getLegacyDashSolver() : uint16_t(in.getDashSolver());
  const auto storage = legacy ? in.getLegacyDashStorage() : uint16_t(in.getDashStorage());
  const auto scaling = legacy ? in.getLegacyDashScaling() : uint16_t(in.getDashScaling());
  if (solver > 3 || storage > 2 || scaling > 1)
    return make_error(errc::malformed_message, "dash: unknown solver, storage or scaling");
  x.dash_solver = static_cast<root_solver>(solver);
  x.dash_storage = static_cast<dash_storage>(storage);
  x.dash_scaling = static_cast<root_scaling>(scaling);
  if (x.type == optimizer_config::kind::dash &&
      (x.dash_block == 0 || x.dash_block > 4096 || x.dash_freq == 0))
    return make_error(errc::malformed_message, "dash: block 1..4096, frequency >= 1");
  return x;
}

void write_optimizer(schema::Optimizer::Builder out, const optimizer_config& x) {
  out.setKind(static_cast<schema::Optimizer::Kind>(static_cast<uint16_t>(x.type)));
  out.setLr(x.lr);
  out.setBeta1(x.beta1);
  out.setBeta2(x.beta2);
  out.setEpsilon(x.epsilon);
  out.setWeightDecay(x.weight_decay);
  out.setLrStaleness(x.lr_staleness);
  out.setRule(x.rule);
  out.setDelay(x.delay);
  out.setDashBlock(x.dash_block);
  out.setDashFreq(x.dash_freq);
  out.setDashSolver(static_cast<schema::Optimizer::RootSolver>(x.dash_solver));
  out.setDashStorage(static_cast<schema::Optimizer::DashStorage>(x.dash_storage));
  out.setDashNesterov(x.dash_nesterov);
  out.setDashScaling(static_cast<schema::Optimizer::RootScaling>(x.dash_scaling));
}

void write_tables(capnp::List<schema::TableSpec>::Builder out,
                  const std::vector<table_config>& tables) {
  for (unsigned i = 0; i < tables.size(); ++i) {
    out[i].setName(tables[i].name);
    out[i].setRowDim(tables[i].row_dim);
    out[i].setInitScale(tables[i].init_scale);
    out[i].setCapacity(tables[i].capacity);
    out[i].setEvict(static_cast<schema::TableSpec::Evict>(tables[i].evict.type));
    out[i].setTtlSeconds(tables[i].evict.ttl_seconds);
    out[i].setAdmitAfter(tables[i].admit_after);
  }
}

caf::expected<std::vector<table_config>> read_tables(capnp::List<schema::TableSpec>::Reader in,
                                                     decode_budget& budget) {
  if (in.size() > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tables");
  std::vector<table_config> out;
  for (auto t : in) {
    auto name = read_text(t.getName(), budget, "table name");
    if (!name) return std::move(name.error());
    const auto evict = static_cast<uint16_t>(t.getEvict());
    const bool ttl = evict == static_cast<uint16_t>(eviction_policy::kind::ttl);
    if (t.getRowDim() == 0 || t.getRowDim() > (1u << 16) || !std::isfinite(t.getInitScale()) ||
        evict > static_cast<uint16_t>(eviction_policy::kind::ttl) ||
        (ttl && t.getTtlSeconds() == 0) || t.getAdmitAfter() > max_admit_after)
      return make_error(errc::malformed_message, "bad table " + *name);
    const eviction_policy policy{static_cast<eviction_policy::kind>(evict),
                                 ttl ? t.getTtlSeconds() : 0};
    out.push_back(table_config{std::move(*name), t.getRowDim(), t.getInitScale(), t.getCapacity(),
                               policy, std::max<uint32_t>(t.getAdmitAfter(), 1)});
  }
  return out;
}

}  // namespace detail

using detail::read_optimizer;
using detail::write_optimizer;

// -- pull ---------------------------------------------------------------------------------------

namespace {

void write_row_requests(capnp::List<schema::RowRequest>::Builder out,
                        const std::vector<row_request>& rows) {
  for (unsigned i = 0; i < rows.size(); ++i) {
    out[i].setTable(rows[i].table);
    auto ids = out[i].initIds(rows[i].ids.size());
    for (unsigned k = 0; k < rows[i].ids.size(); ++k) ids.set(k, rows[i].ids[k]);
  }
}

caf::expected<std::vector<row_request>> read_row_requests(
    capnp::List<schema::RowRequest>::Reader in, decode_budget& budget) {
  if (in.size() > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "pull: too many tables");
  std::vector<row_request> out;
  uint64_t total = 0;
  for (auto r : in) {
    auto table = detail::read_text(r.getTable(), budget, "table name");
    if (!table) return std::move(table.error());
    const auto ids = r.getIds();
    total += ids.size();
    if (total > budget.limits.max_list)
      return make_error(errc::message_too_large, "pull: too many rows");
    out.push_back(row_request{std::move(*table), detail::to_vector<uint64_t>(ids)});
  }
  return out;
}

}  // namespace

wire encode(const pull_request& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::PullRequest>();
  out.setBucket(x.bucket);
  out.setWorker(x.worker);
  out.setWorkerClock(x.worker_clock);
  write_row_requests(out.initRows(x.rows.size()), x.rows);
  write_row_requests(out.initEvicted(x.evicted.size()), x.evicted);
  return detail::to_wire(message);
}

template <>
caf::expected<pull_request> decode<pull_request>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::PullRequest, pull_request>(
      w, limits,
      [](schema::PullRequest::Reader in, decode_budget& budget) -> caf::expected<pull_request> {
        pull_request x{in.getBucket(), in.getWorker(), in.getWorkerClock()};
        auto rows = read_row_requests(in.getRows(), budget);
        if (!rows) return std::move(rows.error());
        x.rows = std::move(*rows);
        auto evicted = read_row_requests(in.getEvicted(), budget);
        if (!evicted) return std::move(evicted.error());
        x.evicted = std::move(*evicted);
        return x;
      });
}

wire encode(const pull_reply& x, const encode_options& opts) {
  return encode(x, x.tensors, opts);
}

namespace {

// A pull reply built with its large tensors referenced where they are.
std::unique_ptr<detail::wire_builder> build_reply(const pull_reply& x,
                                                  const std::vector<dense_tensor>& tensors,
                                                  const encode_options& opts) {
  const auto by_reference = referenced(tensors, opts.storage);
  auto message = std::make_unique<detail::wire_builder>(
      first_segment_words(tensors, opts.storage, by_reference));
  auto out = message->initRoot<schema::PullReply>();
  out.setBucket(x.bucket);
  out.setVersion(x.version);
  detail::write_clock(out.initClock(), x.clock);
  auto list = out.initTensors(tensors.size());
  for (unsigned i = 0; i < tensors.size(); ++i)
    detail::write_dense(list[i], tensors[i], opts.storage, by_reference[i]);
  auto rows = out.initRows(x.rows.size());
  for (unsigned i = 0; i < x.rows.size(); ++i)
    detail::write_sparse(rows[i], x.rows[i], opts.storage);
  return message;
}

}  // namespace

wire encode(const pull_reply& x, const std::vector<dense_tensor>& tensors,
            const encode_options& opts) {
  return build_reply(x, tensors, opts)->finish();
}

std::shared_ptr<const unwritten_bytes> encode_unwritten(const pull_reply& x,
                                                        const std::vector<dense_tensor>& tensors,
                                                        const encode_options& opts) {
  return std::make_shared<const unwritten_bytes>(build_reply(x, tensors, opts));
}

namespace {

// A pull reply's bucket, version, clock and rows (its tensors are read by the caller).
caf::error read_reply_fields(schema::PullReply::Reader in, decode_budget& budget, pull_reply& x) {
  x.bucket = in.getBucket();
  x.version = in.getVersion();
  auto clock = detail::read_clock(in.getClock(), budget);
  if (!clock) return std::move(clock.error());
  x.clock = std::move(*clock);
  const auto rows = in.getRows();
  if (rows.size() > budget.limits.max_tensors)
    return make_error(errc::message_too_large, "too many tables");
  for (auto r : rows) {
    auto table = detail::read_sparse(r, budget);
    if (!table) return std::move(table.error());
    x.rows.push_back(std::move(*table));
  }
  return {};
}

caf::error refused_place(const dense_tensor& t) {
  return make_error(errc::shape_mismatch, "'" + t.name + "' rows from " +
                                              std::to_string(t.row_offset) +
                                              " are not where the reader keeps them");
}

// The local message's values copied to where `place` says; the reply keeps the headers only.
caf::expected<pull_reply> place_local(const pull_reply& local, const value_place& place) {
  pull_reply x{local.bucket, local.version, local.clock, {}, local.rows};
  for (const auto& t : local.tensors) {
    const auto to = place(t);
    if (to.empty() || to.size() != t.values.size()) return refused_place(t);
    std::copy(t.values.begin(), t.values.end(), to.begin());
    x.tensors.push_back(dense_tensor{t.name, t.shape, t.row_offset, {}});
  }
  return x;
}

}  // namespace

template <>
caf::expected<pull_reply> decode<pull_reply>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::PullReply, pull_reply>(
      w, limits,
      [](schema::PullReply::Reader in, decode_budget& budget) -> caf::expected<pull_reply> {
        pull_reply x;
        auto tensors = read_dense_list(in.getTensors(), budget);
        if (!tensors) return std::move(tensors.error());
        x.tensors = std::move(*tensors);
        if (auto err = read_reply_fields(in, budget, x)) return err;
        return x;
      });
}

caf::expected<pull_reply> decode_pull_into(const wire& w, const value_place& place,
                                           const codec_limits& limits) {
  if (w.local) {
    const auto* local = std::get_if<pull_reply>(w.local.get());
    if (!local) return make_error(errc::malformed_message, "a local message of another type");
    return place_local(*local, place);
  }
  return detail::read_root<schema::PullReply, pull_reply>(
      w, limits,
      [&](schema::PullReply::Reader in, decode_budget& budget) -> caf::expected<pull_reply> {
        pull_reply x;
        const auto tensors = in.getTensors();
        if (tensors.size() > budget.limits.max_tensors)
          return make_error(errc::message_too_large, "too many tensors");
        for (auto t : tensors) {
          auto header = detail::read_dense_header(t, budget);
          if (!header) return std::move(header.error());
          const auto to = place(*header);
          if (to.empty() || to.size() != numel(header->shape)) return refused_place(*header);
          if (auto err =
                  detail::read_values_into(t.getData(), t.getDtype(), to, budget, header->name))
            return err;
          x.tensors.push_back(std::move(*header));
        }
        if (auto err = read_reply_fields(in, budget, x)) return err;
        return x;
      });
}

wire encode(const push_ack& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::PushAck>();
  out.setBucket(x.bucket);
  out.setVersion(x.version);
  out.setStaleness(x.staleness);
  return detail::to_wire(message);
}

template <>
caf::expected<push_ack> decode<push_ack>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::PushAck, push_ack>(
      w, limits, [](schema::PushAck::Reader in, decode_budget&) -> caf::expected<push_ack> {
        return push_ack{in.getBucket(), in.getVersion(), in.getStaleness()};
      });
}

// -- bucket spec and statistics -------------------------------------------------------------

wire encode(const bucket_spec& x) {
  detail::wire_builder message(first_segment_words(x.tensors, dtype::f32));
  auto out = message.initRoot<schema::BucketSpec>();
  out.setBucket(x.bucket);
  out.setWorkers(x.workers);
  write_optimizer(out.initOptimizer(), x.optimizer);
  auto consistency = out.initConsistency();
  consistency.setMode(static_cast<schema::Consistency::Mode>(x.consistency.type));
  consistency.setBound(x.consistency.bound);
  auto compensation = out.initCompensation();
  compensation.setKind(static_cast<schema::Compensation::Kind>(x.compensation.type));
  compensation.setLambda(x.compensation.lambda);
  detail::write_tables(out.initTables(x.tables.size()), x.tables);
  out.setBucketCount(x.bucket_count);
  out.setSeed(x.seed);
  out.setClip(x.clip);
  out.setSyncThreshold(x.sync_threshold);
  out.setValuesFollow(x.values_follow);
  out.setExportDir(x.export_dir);
  out.setExportEverySeconds(x.export_every_s);
  out.setExportSnapshotEvery(x.export_snapshot_every);
  auto tensors = out.initTensors(x.tensors.size());
  for (unsigned i = 0; i < x.tensors.size(); ++i) {
    const auto& t = x.tensors[i];
    if (x.values_follow)  // the shape alone
      detail::write_dense(tensors[i], dense_view{t.name, t.shape, t.row_offset, {}}, dtype::f32);
    else
      detail::write_dense(tensors[i], t, dtype::f32);
  }
  return message.finish();
}

template <>
caf::expected<bucket_spec> decode<bucket_spec>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::BucketSpec, bucket_spec>(
      w, limits,
      [](schema::BucketSpec::Reader in, decode_budget& budget) -> caf::expected<bucket_spec> {
        bucket_spec x;
        x.bucket = in.getBucket();
        x.workers = in.getWorkers();
        if (x.workers == 0 || x.workers > budget.limits.max_clock_entries)
          return make_error(errc::malformed_message, "bucket spec: bad worker count");
        auto opt = read_optimizer(in.getOptimizer(), budget);
        if (!opt) return std::move(opt.error());
        x.optimizer = *opt;
        auto consistency = read_consistency(in.getConsistency());
        if (!consistency) return std::move(consistency.error());
        x.consistency = *consistency;
        auto compensation = read_compensation(in.getCompensation());
        if (!compensation) return std::move(compensation.error());
        x.compensation = *compensation;
        auto tables = detail::read_tables(in.getTables(), budget);
        if (!tables) return std::move(tables.error());
        x.tables = std::move(*tables);
        x.bucket_count = in.getBucketCount();
        if (x.bucket_count == 0 || (!x.tables.empty() && x.bucket >= x.bucket_count))
          return make_error(errc::malformed_message, "bucket spec: bad bucket count");
        x.seed = in.getSeed();
        x.clip = in.getClip();
        if (!std::isfinite(x.clip) || x.clip < 0)
          return make_error(errc::malformed_message, "bucket spec: bad clip");
        x.sync_threshold = in.getSyncThreshold();
        if (!std::isfinite(x.sync_threshold) || x.sync_threshold < 0)
          return make_error(errc::malformed_message, "bucket spec: bad sync threshold");
        x.values_follow = in.getValuesFollow();
        auto export_dir = detail::read_text(in.getExportDir(), budget, "export directory");
        if (!export_dir) return std::move(export_dir.error());
        x.export_dir = std::move(*export_dir);
        x.export_every_s = std::max<uint32_t>(in.getExportEverySeconds(), 1);
        x.export_snapshot_every = std::max<uint32_t>(in.getExportSnapshotEvery(), 1);
        if (!x.values_follow) {
          auto tensors = read_dense_list(in.getTensors(), budget);
          if (!tensors) return std::move(tensors.error());
          x.tensors = std::move(*tensors);
          return x;
        }
        uint64_t declared = 0;
        for (auto t : in.getTensors()) {
          auto shape = detail::read_dense_shape_only(t, budget, declared);
          if (!shape) return std::move(shape.error());
          x.tensors.push_back(std::move(*shape));
        }
        return x;
      });
}

wire encode(const bucket_stats& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::BucketStats>();
  out.setBucket(x.bucket);
  out.setVersion(x.version);
  out.setUpdatesApplied(x.updates_applied);
  out.setUpdatesRejected(x.updates_rejected);
  out.setMaxStaleness(x.max_staleness);
  out.setStalenessSum(x.staleness_sum);
  detail::write_clock(out.initClock(), x.clock);
  auto histogram = out.initStalenessHistogram(x.staleness_histogram.size());
  for (unsigned i = 0; i < x.staleness_histogram.size(); ++i)
    histogram.set(i, x.staleness_histogram[i]);
  out.setMaxClockGap(x.max_clock_gap);
  out.setUpdatesSkipped(x.updates_skipped);
  out.setUpdateVariance(x.update_variance);
  out.setDuplicatePushes(x.duplicate_pushes);
  auto tables = out.initTables(x.tables.size());
  for (unsigned i = 0; i < x.tables.size(); ++i) {
    const auto& t = x.tables[i];
    tables[i].setTable(t.table);
    tables[i].setRows(t.rows);
    tables[i].setRowsEvicted(t.rows_evicted);
    tables[i].setIdsNotAdmitted(t.ids_not_admitted);
    tables[i].setGradsDropped(t.grads_dropped);
  }
  return detail::to_wire(message);
}

template <>
caf::expected<bucket_stats> decode<bucket_stats>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::BucketStats, bucket_stats>(
      w, limits,
      [](schema::BucketStats::Reader in, decode_budget& budget) -> caf::expected<bucket_stats> {
        bucket_stats x;
        x.bucket = in.getBucket();
        x.version = in.getVersion();
        x.updates_applied = in.getUpdatesApplied();
        x.updates_rejected = in.getUpdatesRejected();
        x.max_staleness = in.getMaxStaleness();
        x.staleness_sum = in.getStalenessSum();
        auto clock = detail::read_clock(in.getClock(), budget);
        if (!clock) return std::move(clock.error());
        x.clock = std::move(*clock);
        const auto histogram = in.getStalenessHistogram();
        if (histogram.size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "staleness histogram too long");
        x.staleness_histogram = detail::to_vector<uint64_t>(histogram);
        x.max_clock_gap = in.getMaxClockGap();
        x.updates_skipped = in.getUpdatesSkipped();
        x.update_variance = in.getUpdateVariance();
        x.duplicate_pushes = in.getDuplicatePushes();
        if (in.getTables().size() > budget.limits.max_tensors)
          return make_error(errc::message_too_large, "bucket stats: too many tables");
        for (auto t : in.getTables()) {
          auto name = detail::read_text(t.getTable(), budget, "table name");
          if (!name) return std::move(name.error());
          x.tables.push_back(table_counters{std::move(*name), t.getRows(), t.getRowsEvicted(),
                                            t.getIdsNotAdmitted(), t.getGradsDropped()});
        }
        return x;
      });
}

}  // namespace troupe
