// Codec for saved state: the parts of a bucket's state (checkpoints and new backups) and the
// job's part of a checkpoint. Decoding checks sizes and finiteness like every other message.
#include <cmath>

#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;

namespace {

void write_f32(capnp::Data::Builder out, const std::vector<float>& values) {
  detail::write_values(out, values, dtype::f32);
}

caf::expected<std::vector<float>> read_f32(capnp::Data::Reader data, uint64_t count,
                                           decode_budget& budget, const std::string& what) {
  if (data.size() == 0 && count != 0) return std::vector<float>{};
  return detail::read_values(data, schema::DType::F32, count, budget, what);
}

void write_counters(schema::BucketCounters::Builder out, const bucket_counters& x) {
  detail::write_clock(out.initClock(), x.clock);
  auto retired = out.initRetired(x.retired.size());
  for (unsigned i = 0; i < x.retired.size(); ++i) retired.set(i, x.retired[i]);
  auto start = out.initStart(x.start.size());
  for (unsigned i = 0; i < x.start.size(); ++i) start.set(i, x.start[i]);
  detail::write_bytes(out.initInRound(x.in_round.size()), x.in_round);
  out.setVersion(x.version);
  out.setApplied(x.applied);
  out.setRejected(x.rejected);
  out.setMaxStaleness(x.max_staleness);
  out.setStalenessSum(x.staleness_sum);
  out.setMaxClockGap(x.max_clock_gap);
  auto histogram = out.initHistogram(x.histogram.size());
  for (unsigned i = 0; i < x.histogram.size(); ++i) histogram.set(i, x.histogram[i]);
  auto next = out.initNextPush(x.next_push.size());
  for (unsigned i = 0; i < x.next_push.size(); ++i) next.set(i, x.next_push[i]);
  out.setSkipped(x.skipped);
  out.setDuplicates(x.duplicates);
  detail::write_chunks(out.initCountedBatches(x.counted_batches.size()), x.counted_batches);
}

caf::expected<bucket_counters> read_counters(schema::BucketCounters::Reader in,
                                             decode_budget& budget) {
  bucket_counters x;
  auto clock = detail::read_clock(in.getClock(), budget);
  if (!clock) return std::move(clock.error());
  x.clock = std::move(*clock);
  const size_t cap = budget.limits.max_clock_entries;
  if (in.getRetired().size() > cap || in.getStart().size() > cap ||
      in.getHistogram().size() > budget.limits.max_list || in.getNextPush().size() > cap)
    return make_error(errc::message_too_large, "bucket counters: lists too long");
  for (bool r : in.getRetired()) x.retired.push_back(r);
  x.start = detail::to_vector<uint64_t>(in.getStart());
  auto in_round = detail::read_bytes(in.getInRound(), cap, "bsp round");
  if (!in_round) return std::move(in_round.error());
  x.in_round = std::move(*in_round);
  for (uint8_t r : x.in_round)
    if (r > 2) return make_error(errc::malformed_message, "bucket counters: bad bsp round entry");
  x.version = in.getVersion();
  x.applied = in.getApplied();
  x.rejected = in.getRejected();
  x.max_staleness = in.getMaxStaleness();
  x.staleness_sum = in.getStalenessSum();
  x.max_clock_gap = in.getMaxClockGap();
  x.histogram = detail::to_vector<uint64_t>(in.getHistogram());
  x.next_push = detail::to_vector<uint64_t>(in.getNextPush());
  x.skipped = in.getSkipped();
  x.duplicates = in.getDuplicates();
  auto batches = detail::read_chunks(in.getCountedBatches(), budget);
  if (!batches) return std::move(batches.error());
  for (const auto& b : *batches)
    if (b.first >= detail::max_batch_index)
      return make_error(errc::malformed_message, "bucket counters: batches out of range");
  x.counted_batches = std::move(*batches);
  return x;
}

void write_rows(schema::TableRows::Builder out, const table_rows& x) {
  out.setTable(x.table);
  out.setRowDim(x.row_dim);
  auto ids = out.initIds(x.ids.size());
  for (unsigned i = 0; i < x.ids.size(); ++i) ids.set(i, x.ids[i]);
  write_f32(out.initValues(x.values.size() * 4), x.values);
  write_f32(out.initM(x.m.size() * 4), x.m);
  write_f32(out.initV(x.v.size() * 4), x.v);
  auto steps = out.initSteps(x.steps.size());
  for (unsigned i = 0; i < x.steps.size(); ++i) steps.set(i, x.steps[i]);
  auto marks = out.initMarks(x.marks.size());
  for (unsigned i = 0; i < x.marks.size(); ++i) marks.set(i, x.marks[i]);
}

void write_table_state(schema::TableState::Builder out, const table_state& x) {
  out.setTable(x.table);
  out.setSightings(kj::arrayPtr(x.sightings.data(), x.sightings.size()));
  out.setSinceHalving(x.since_halving);
  out.setTick(x.tick);
  out.setReadsSinceAging(x.reads_since_aging);
  out.setLastSweep(x.last_sweep);
  out.setRowsEvicted(x.rows_evicted);
  out.setIdsNotAdmitted(x.ids_not_admitted);
  out.setGradsDropped(x.grads_dropped);
}

caf::expected<table_state> read_table_state(schema::TableState::Reader in,
                                            decode_budget& budget) {
  table_state x;
  auto name = detail::read_text(in.getTable(), budget, "table name");
  if (!name) return std::move(name.error());
  x.table = std::move(*name);
  const auto sightings = in.getSightings();
  x.sightings.assign(sightings.begin(), sightings.end());
  x.since_halving = in.getSinceHalving();
  x.tick = in.getTick();
  x.reads_since_aging = in.getReadsSinceAging();
  x.last_sweep = in.getLastSweep();
  x.rows_evicted = in.getRowsEvicted();
  x.ids_not_admitted = in.getIdsNotAdmitted();
  x.grads_dropped = in.getGradsDropped();
  return x;
}

caf::expected<table_rows> read_rows(schema::TableRows::Reader in, decode_budget& budget) {
  table_rows x;
  auto name = detail::read_text(in.getTable(), budget, "table name");
  if (!name) return std::move(name.error());
  x.table = std::move(*name);
  x.row_dim = in.getRowDim();
  if (x.row_dim == 0 || x.row_dim > (1u << 16))
    return make_error(errc::malformed_message, "saved rows: bad row width");
  if (in.getIds().size() > budget.limits.max_list || in.getSteps().size() > in.getIds().size() ||
      in.getMarks().size() > in.getIds().size())
    return make_error(errc::message_too_large, "saved rows: too many ids");
  x.ids = detail::to_vector<uint64_t>(in.getIds());
  x.steps = detail::to_vector<uint64_t>(in.getSteps());
  x.marks = detail::to_vector<uint32_t>(in.getMarks());
  const uint64_t count = x.ids.size() * uint64_t{x.row_dim};
  auto values = read_f32(in.getValues(), count, budget, x.table);
  auto m = read_f32(in.getM(), count, budget, x.table + " m");
  auto v = read_f32(in.getV(), count, budget, x.table + " v");
  if (!values) return std::move(values.error());
  if (!m) return std::move(m.error());
  if (!v) return std::move(v.error());
  if (values->size() != count)
    return make_error(errc::shape_mismatch, "saved rows: values do not match the ids");
  x.values = std::move(*values);
  x.m = std::move(*m);
  x.v = std::move(*v);
  return x;
}

}  // namespace

wire encode(const bucket_state_part& x) {
  unsigned words = 1024;
  for (const auto& t : x.tensors) words += static_cast<unsigned>(t.values.size() / 2 + 16);
  words += static_cast<unsigned>(x.rows.values.size() * 3 / 2 + x.rows.ids.size() * 3 +
                                 x.state.sightings.size() / 8);
  detail::wire_builder message(words);
  auto out = message.initRoot<schema::BucketStatePart>();
  out.setBucket(x.bucket);
  out.setKind(static_cast<schema::BucketStatePart::Kind>(static_cast<uint16_t>(x.type)));
  out.setWorker(x.worker);
  out.setRanged(x.ranged);
  auto tensors = out.initTensors(x.tensors.size());
  for (unsigned i = 0; i < x.tensors.size(); ++i)
    detail::write_dense(tensors[i], x.tensors[i], dtype::f32);
  write_counters(out.initCounters(), x.counters);
  write_rows(out.initRows(), x.rows);
  if (x.type == bucket_state_part::kind::table_state)
    write_table_state(out.initTableState(), x.state);
  return message.finish();
}

template <>
caf::expected<bucket_state_part> decode<bucket_state_part>(const wire& w,
                                                           const codec_limits& limits) {
  return detail::read_root<schema::BucketStatePart, bucket_state_part>(
      w, limits,
      [](schema::BucketStatePart::Reader in,
         decode_budget& budget) -> caf::expected<bucket_state_part> {
        bucket_state_part x;
        x.bucket = in.getBucket();
        const auto kind = static_cast<uint16_t>(in.getKind());
        if (kind > static_cast<uint16_t>(bucket_state_part::kind::table_state))
          return make_error(errc::malformed_message, "unknown bucket state part");
        x.type = static_cast<bucket_state_part::kind>(kind);
        x.worker = in.getWorker();
        x.ranged = in.getRanged();
        if (in.getTensors().size() > budget.limits.max_tensors)
          return make_error(errc::message_too_large, "too many tensors");
        for (auto t : in.getTensors()) {
          auto dense = detail::read_dense(t, budget);
          if (!dense) return std::move(dense.error());
          x.tensors.push_back(std::move(*dense));
        }
        auto counters = read_counters(in.getCounters(), budget);
        if (!counters) return std::move(counters.error());
        x.counters = std::move(*counters);
        if (in.hasRows() && in.getRows().getRowDim() != 0) {
          auto rows = read_rows(in.getRows(), budget);
          if (!rows) return std::move(rows.error());
          x.rows = std::move(*rows);
        }
        if (x.type == bucket_state_part::kind::table_state) {
          auto state = read_table_state(in.getTableState(), budget);
          if (!state) return std::move(state.error());
          x.state = std::move(*state);
        }
        return x;
      });
}

namespace detail {

void write_job_checkpoint(schema::JobCheckpoint::Builder out, const job_checkpoint& x) {
  out.setStep(x.step);
  out.setEpochs(x.epochs);
  out.setBatchesPerEpoch(x.batches_per_epoch);
  out.setChunk(x.chunk);
  out.setBuckets(x.buckets);
  out.setModelValues(x.model_values);
  out.setNextEpoch(x.next_epoch);
  out.setNextBatch(x.next_batch);
  auto pending = out.initPending(x.pending.size());
  for (unsigned i = 0; i < x.pending.size(); ++i) write_chunk(pending[i], x.pending[i]);
  auto finished = out.initFinished(x.finished.size());
  for (unsigned i = 0; i < x.finished.size(); ++i) finished.set(i, x.finished[i]);
  auto loss = out.initEpochLoss(x.epoch_loss.size());
  for (unsigned i = 0; i < x.epoch_loss.size(); ++i) loss.set(i, x.epoch_loss[i]);
  auto batches = out.initEpochBatches(x.epoch_batches.size());
  for (unsigned i = 0; i < x.epoch_batches.size(); ++i) batches.set(i, x.epoch_batches[i]);
  out.setEvaluated(x.evaluated);
  write_epochs(out.initHistory(x.history.size()), x.history);
  out.setWallS(x.wall_s);
  out.setZeroStage(x.zero_stage);
}

caf::expected<job_checkpoint> read_job_checkpoint(schema::JobCheckpoint::Reader in,
                                                  const decode_budget& budget) {
  job_checkpoint x;
  x.step = in.getStep();
  x.epochs = in.getEpochs();
  x.batches_per_epoch = in.getBatchesPerEpoch();
  x.chunk = in.getChunk();
  x.buckets = in.getBuckets();
  x.model_values = in.getModelValues();
  x.next_epoch = in.getNextEpoch();
  x.next_batch = in.getNextBatch();
  const size_t cap = budget.limits.max_list;
  if (x.epochs > cap || in.getPending().size() > cap || in.getFinished().size() != x.epochs ||
      in.getEpochLoss().size() != x.epochs || in.getEpochBatches().size() != x.epochs ||
      in.getHistory().size() > x.epochs || in.getEvaluated() > x.epochs ||
      x.next_epoch > x.epochs || x.chunk == 0 || in.getZeroStage() > 2)
    return make_error(errc::malformed_message, "job checkpoint: inconsistent sizes");
  for (auto c : in.getPending()) {
    const work_chunk chunk = read_chunk(c);
    if (chunk.epoch >= x.epochs || chunk.count == 0 ||
        chunk.first + chunk.count > x.batches_per_epoch)
      return make_error(errc::malformed_message, "job checkpoint: bad pending chunk");
    x.pending.push_back(chunk);
  }
  x.finished = to_vector<uint64_t>(in.getFinished());
  x.epoch_loss = to_vector<double>(in.getEpochLoss());
  x.epoch_batches = to_vector<uint64_t>(in.getEpochBatches());
  x.evaluated = in.getEvaluated();
  x.history = read_epochs(in.getHistory());
  x.wall_s = in.getWallS();
  x.zero_stage = in.getZeroStage();
  return x;
}

}  // namespace detail

wire encode(const job_checkpoint& x) {
  capnp::MallocMessageBuilder message;
  detail::write_job_checkpoint(message.initRoot<schema::JobCheckpoint>(), x);
  return detail::to_wire(message);
}

template <>
caf::expected<job_checkpoint> decode<job_checkpoint>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::JobCheckpoint, job_checkpoint>(
      w, limits, [](schema::JobCheckpoint::Reader in, decode_budget& budget) {
        return detail::read_job_checkpoint(in, budget);
      });
}

}  // namespace troupe

namespace troupe {

wire encode(const table_view& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Table>();
  auto columns = out.initColumns(x.columns.size());
  for (unsigned i = 0; i < x.columns.size(); ++i) columns.set(i, x.columns[i]);
  auto rows = out.initRows(x.rows.size());
  for (unsigned r = 0; r < x.rows.size(); ++r) {
    auto cells = rows[r].initCells(x.rows[r].size());
    for (unsigned c = 0; c < x.rows[r].size(); ++c) cells.set(c, x.rows[r][c]);
  }
  return detail::to_wire(message);
}

template <>
caf::expected<table_view> decode<table_view>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Table, table_view>(
      w, limits,
      [](schema::Table::Reader in, detail::decode_budget& budget) -> caf::expected<table_view> {
        table_view x;
        if (in.getColumns().size() > 64 || in.getRows().size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "table too large");
        for (auto c : in.getColumns()) {
          auto text = detail::read_text(c, budget, "column");
          if (!text) return std::move(text.error());
          x.columns.push_back(std::move(*text));
        }
        for (auto row : in.getRows()) {
          if (row.getCells().size() != x.columns.size())
            return make_error(errc::malformed_message, "a row with the wrong number of cells");
          auto& cells = x.rows.emplace_back();
          for (auto c : row.getCells()) {
            auto text = detail::read_text(c, budget, "cell");
            if (!text) return std::move(text.error());
            cells.push_back(std::move(*text));
          }
        }
        return x;
      });
}

}  // namespace troupe
