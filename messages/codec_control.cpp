// Codec for the control plane: the join handshake, membership, placement, progress, report.
#include <cmath>

#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;
using detail::read_endpoint;
using detail::read_role;
using detail::write_endpoint;
using detail::write_role;

namespace detail {

caf::expected<role> read_role(schema::Role in) {
  switch (in) {
    case schema::Role::COORDINATOR:
      return role::coordinator;
    case schema::Role::SERVER:
      return role::server;
    case schema::Role::WORKER:
      return role::worker;
    case schema::Role::CONSOLE:
      return role::console;
  }
  return make_error(errc::malformed_message, "unknown role");
}

schema::Role write_role(role r) {
  return static_cast<schema::Role>(static_cast<uint16_t>(r));
}

void write_endpoint(schema::Endpoint::Builder out, const endpoint& x) {
  out.setHost(x.host);
  out.setPort(x.port);
  out.setLane(x.lane);
}

caf::expected<endpoint> read_endpoint(schema::Endpoint::Reader in, const decode_budget& budget) {
  auto host = detail::read_text(in.getHost(), budget, "host");
  if (!host) return std::move(host.error());
  return endpoint{std::move(*host), in.getPort(), in.getLane()};
}

}  // namespace detail

namespace {

constexpr size_t max_nonce_bytes = 64;

}  // namespace

namespace detail {

void write_placement(schema::Placement::Builder out, const placement& x) {
  out.setVersion(x.version);
  auto buckets = out.initBuckets(x.buckets.size());
  for (unsigned i = 0; i < x.buckets.size(); ++i) {
    const auto& b = x.buckets[i];
    buckets[i].setBucket(b.bucket);
    buckets[i].setServer(b.server);
    auto slices = buckets[i].initSlices(b.slices.size());
    for (unsigned j = 0; j < b.slices.size(); ++j) {
      slices[j].setTensor(b.slices[j].tensor);
      slices[j].setRowOffset(b.slices[j].row_offset);
      detail::write_shape(slices[j].initShape(b.slices[j].shape.size()), b.slices[j].shape);
    }
  }
}

caf::expected<placement> read_placement(schema::Placement::Reader in, decode_budget& budget) {
  placement x;
  x.version = in.getVersion();
  const auto buckets = in.getBuckets();
  if (buckets.size() > budget.limits.max_list)
    return make_error(errc::message_too_large, "placement: too many buckets");
  for (auto b : buckets) {
    bucket_placement out{b.getBucket(), b.getServer(), {}};
    const auto slices = b.getSlices();
    if (slices.size() > budget.limits.max_tensors)
      return make_error(errc::message_too_large, "placement: too many slices");
    for (auto s : slices) {
      auto name = detail::read_text(s.getTensor(), budget, "slice name");
      if (!name) return std::move(name.error());
      auto shape = detail::read_shape(s.getShape(), budget);
      if (!shape) return std::move(shape.error());
      out.slices.push_back(slice{std::move(*name), s.getRowOffset(), std::move(*shape)});
    }
    x.buckets.push_back(std::move(out));
  }
  return x;
}

}  // namespace detail

using detail::read_placement;
using detail::write_placement;

// -- handshake ----------------------------------------------------------------------------------

wire encode(const hello& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Hello>();
  out.setRole(write_role(x.sender));
  out.setName(x.name);
  detail::write_bytes(out.initNodeNonce(x.node_nonce.size()), x.node_nonce);
  out.setSchemaVersion(x.schema_version);
  return detail::to_wire(message);
}

template <>
caf::expected<hello> decode<hello>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Hello, hello>(
      w, limits, [](schema::Hello::Reader in, decode_budget& budget) -> caf::expected<hello> {
        auto r = read_role(in.getRole());
        if (!r) return std::move(r.error());
        auto name = detail::read_text(in.getName(), budget, "node name");
        if (!name) return std::move(name.error());
        auto nonce = detail::read_bytes(in.getNodeNonce(), max_nonce_bytes, "nonce");
        if (!nonce) return std::move(nonce.error());
        return hello{*r, std::move(*name), std::move(*nonce), in.getSchemaVersion()};
      });
}

wire encode(const challenge& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Challenge>();
  out.setSession(x.session);
  detail::write_bytes(out.initGatekeeperNonce(x.gatekeeper_nonce.size()), x.gatekeeper_nonce);
  detail::write_bytes(out.initGatekeeperProof(x.gatekeeper_proof.size()), x.gatekeeper_proof);
  out.setSchemaVersion(x.schema_version);
  return detail::to_wire(message);
}

template <>
caf::expected<challenge> decode<challenge>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Challenge, challenge>(
      w, limits, [](schema::Challenge::Reader in, decode_budget&) -> caf::expected<challenge> {
        auto nonce = detail::read_bytes(in.getGatekeeperNonce(), max_nonce_bytes, "nonce");
        if (!nonce) return std::move(nonce.error());
        auto mac = detail::read_bytes(in.getGatekeeperProof(), max_nonce_bytes, "proof");
        if (!mac) return std::move(mac.error());
        return challenge{in.getSession(), std::move(*nonce), std::move(*mac),
                         in.getSchemaVersion()};
      });
}

wire encode(const proof& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Proof>();
  out.setSession(x.session);
  detail::write_bytes(out.initNodeProof(x.node_proof.size()), x.node_proof);
  return detail::to_wire(message);
}

template <>
caf::expected<proof> decode<proof>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Proof, proof>(
      w, limits, [](schema::Proof::Reader in, decode_budget&) -> caf::expected<proof> {
        auto mac = detail::read_bytes(in.getNodeProof(), max_nonce_bytes, "proof");
        if (!mac) return std::move(mac.error());
        return proof{in.getSession(), std::move(*mac)};
      });
}

wire encode(const operator_action& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::OperatorAction>();
  out.setNonce(x.nonce);
  auto action = out.initAction(static_cast<unsigned>(x.action.size()));
  for (unsigned i = 0; i < x.action.size(); ++i) action.set(i, x.action[i]);
  detail::write_bytes(out.initCertificate(x.certificate.size()),
                      std::vector<uint8_t>(x.certificate.begin(), x.certificate.end()));
  detail::write_bytes(out.initProof(x.proof.size()), x.proof);
  return detail::to_wire(message);
}

template <>
caf::expected<operator_action> decode<operator_action>(const wire& w, const codec_limits& limits) {
  constexpr size_t max_action_words = 4, max_certificate = 16384, max_proof = 512;
  return detail::read_root<schema::OperatorAction, operator_action>(
      w, limits,
      [](schema::OperatorAction::Reader in,
         decode_budget& budget) -> caf::expected<operator_action> {
        operator_action x;
        auto nonce = detail::read_text(in.getNonce(), budget, "nonce");
        if (!nonce) return std::move(nonce.error());
        x.nonce = std::move(*nonce);
        if (in.getAction().size() > max_action_words)
          return make_error(errc::message_too_large, "operator action: too many words");
        for (auto word : in.getAction()) {
          auto text = detail::read_text(word, budget, "operator action");
          if (!text) return std::move(text.error());
          x.action.push_back(std::move(*text));
        }
        auto cert = detail::read_bytes(in.getCertificate(), max_certificate, "certificate");
        if (!cert) return std::move(cert.error());
        x.certificate.assign(cert->begin(), cert->end());
        auto proof = detail::read_bytes(in.getProof(), max_proof, "operator proof");
        if (!proof) return std::move(proof.error());
        x.proof = std::move(*proof);
        return x;
      });
}

// -- membership ---------------------------------------------------------------------------------

wire encode(const join_request& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Join>();
  out.setRole(write_role(x.sender));
  out.setName(x.name);
  out.setPid(x.pid);
  write_endpoint(out.initDataEndpoint(), x.data);
  out.setHostLabel(x.host_label);
  return detail::to_wire(message);
}

template <>
caf::expected<join_request> decode<join_request>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Join, join_request>(
      w, limits, [](schema::Join::Reader in, decode_budget& budget) -> caf::expected<join_request> {
        auto r = read_role(in.getRole());
        if (!r) return std::move(r.error());
        auto name = detail::read_text(in.getName(), budget, "node name");
        if (!name) return std::move(name.error());
        auto data = read_endpoint(in.getDataEndpoint(), budget);
        if (!data) return std::move(data.error());
        auto label = detail::read_text(in.getHostLabel(), budget, "host label");
        if (!label) return std::move(label.error());
        return join_request{*r, std::move(*name), in.getPid(), std::move(*data), std::move(*label)};
      });
}

wire encode(const join_reply& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::JoinReply>();
  out.setRank(x.rank);
  out.setWorldWorkers(x.world_workers);
  out.setWorldServers(x.world_servers);
  out.setTerm(x.term);
  return detail::to_wire(message);
}

template <>
caf::expected<join_reply> decode<join_reply>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::JoinReply, join_reply>(
      w, limits, [](schema::JoinReply::Reader in, decode_budget&) -> caf::expected<join_reply> {
        return join_reply{in.getRank(), in.getWorldWorkers(), in.getWorldServers(), in.getTerm()};
      });
}

wire encode(const heartbeat& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Heartbeat>();
  out.setName(x.name);
  out.setSequence(x.sequence);
  out.setSentUnixMs(x.sent_unix_ms);
  out.setCpuSeconds(x.cpu_seconds);
  out.setRssBytes(x.rss_bytes);
  out.setPeakRssBytes(x.peak_rss_bytes);
  auto activity = out.initActivity(std::min(x.activity.size(), max_activity_records));
  for (unsigned i = 0; i < activity.size(); ++i) {
    const auto& a = x.activity[i];
    activity[i].setMember(a.member);
    activity[i].setDoing(a.doing);
    activity[i].setWaitingOn(a.waiting_on);
    activity[i].setSinceS(a.since_s);
  }
  return detail::to_wire(message);
}

template <>
caf::expected<heartbeat> decode<heartbeat>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Heartbeat, heartbeat>(
      w, limits,
      [](schema::Heartbeat::Reader in, decode_budget& budget) -> caf::expected<heartbeat> {
        auto name = detail::read_text(in.getName(), budget, "node name");
        if (!name) return std::move(name.error());
        const double cpu = in.getCpuSeconds();
        heartbeat x{std::move(*name), in.getSequence(), in.getSentUnixMs(),
                    std::isfinite(cpu) && cpu >= 0 ? cpu : 0.0, in.getRssBytes()};
        x.peak_rss_bytes = in.getPeakRssBytes();
        if (in.getActivity().size() > max_activity_records)
          return make_error(errc::message_too_large, "heartbeat: too many activity records");
        for (auto a : in.getActivity()) {
          auto member = detail::read_text(a.getMember(), budget, "member name");
          auto doing = detail::read_text(a.getDoing(), budget, "activity");
          auto waiting = detail::read_text(a.getWaitingOn(), budget, "activity");
          if (!member) return std::move(member.error());
          if (!doing) return std::move(doing.error());
          if (!waiting) return std::move(waiting.error());
          const double since = a.getSinceS();
          x.activity.push_back(member_activity{std::move(*member), std::move(*doing),
                                               std::move(*waiting),
                                               std::isfinite(since) && since >= 0 ? since : 0.0});
        }
        return x;
      });
}

wire encode(const placement& x) {
  capnp::MallocMessageBuilder message;
  write_placement(message.initRoot<schema::Placement>(), x);
  return detail::to_wire(message);
}

template <>
caf::expected<placement> decode<placement>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Placement, placement>(w, limits, read_placement);
}

// -- progress and report ------------------------------------------------------------------------

namespace {

caf::expected<local_rounds> read_local_rounds(schema::LocalRounds::Reader in,
                                              decode_budget& budget) {
  auto inner = detail::read_optimizer(in.getInner(), budget);
  if (!inner) return std::move(inner.error());
  local_rounds x{std::move(*inner), in.getFragments(), comm_dtype::fp32, in.getSlowdown()};
  if (x.fragments == 0 || x.fragments > (1u << 16) || in.getCommDtype() > 3 || !(x.slowdown >= 1) ||
      x.slowdown > 1000)
    return make_error(errc::malformed_message, "start: bad local rounds");
  x.storage = static_cast<comm_dtype>(in.getCommDtype());
  return x;
}

}  // namespace

wire encode(const start_job& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::StartJob>();
  out.setWorker(x.worker);
  out.setWorkers(x.workers);
  out.setEpochs(x.epochs);
  out.setBatch(x.batch);
  out.setSeed(x.seed);
  write_placement(out.initPlacement(), x.layout);
  auto servers = out.initServers(x.servers.size());
  for (unsigned i = 0; i < x.servers.size(); ++i) write_endpoint(servers[i], x.servers[i]);
  out.setAccumulate(x.accumulate);
  out.setPrefetch(x.prefetch);
  out.setCompressSigns(x.compress_signs);
  out.setClock(x.clock);
  out.setDelayMs(x.delay_ms);
  out.setWorkersOnHost(x.workers_on_host);
  out.setPullsHeld(x.pulls_held);
  if (x.rounds) {
    auto rounds = out.initRounds();
    detail::write_optimizer(rounds.initInner(), x.rounds->inner);
    rounds.setFragments(x.rounds->fragments);
    rounds.setCommDtype(static_cast<uint8_t>(x.rounds->storage));
    rounds.setSlowdown(x.rounds->slowdown);
  }
  return detail::to_wire(message);
}

template <>
caf::expected<start_job> decode<start_job>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::StartJob, start_job>(
      w, limits,
      [](schema::StartJob::Reader in, decode_budget& budget) -> caf::expected<start_job> {
        auto layout = read_placement(in.getPlacement(), budget);
        if (!layout) return std::move(layout.error());
        if (in.getWorkers() == 0 || in.getWorker() >= in.getWorkers() || in.getBatch() == 0)
          return make_error(errc::malformed_message, "start: bad worker index or batch size");
        start_job x{in.getWorker(),
                    in.getWorkers(),
                    in.getEpochs(),
                    in.getBatch(),
                    in.getSeed(),
                    std::move(*layout),
                    {}};
        const auto servers = in.getServers();
        if (servers.size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "start: too many servers");
        for (auto s : servers) {
          auto e = read_endpoint(s, budget);
          if (!e) return std::move(e.error());
          x.servers.push_back(std::move(*e));
        }
        if (in.getAccumulate() == 0)
          return make_error(errc::malformed_message, "start: accumulate must be at least 1");
        x.accumulate = in.getAccumulate();
        x.prefetch = in.getPrefetch();
        x.compress_signs = in.getCompressSigns();
        x.clock = in.getClock();
        x.delay_ms = in.getDelayMs();
        x.workers_on_host = in.getWorkersOnHost();
        x.pulls_held = in.getPullsHeld();
        if (in.hasRounds()) {
          auto rounds = read_local_rounds(in.getRounds(), budget);
          if (!rounds) return std::move(rounds.error());
          x.rounds = std::move(*rounds);
        }
        return x;
      });
}

wire encode(const work_lease& x) {
  capnp::MallocMessageBuilder message;
  detail::write_chunks(message.initRoot<schema::WorkLease>().initChunks(x.chunks.size()), x.chunks);
  return detail::to_wire(message);
}

template <>
caf::expected<work_lease> decode<work_lease>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::WorkLease, work_lease>(
      w, limits,
      [](schema::WorkLease::Reader in, decode_budget& budget) -> caf::expected<work_lease> {
        auto chunks = detail::read_chunks(in.getChunks(), budget);
        if (!chunks) return std::move(chunks.error());
        return work_lease{std::move(*chunks)};
      });
}

wire encode(const progress_batch& x) {
  capnp::MallocMessageBuilder message;
  auto reports = message.initRoot<schema::ProgressBatch>().initReports(x.reports.size());
  for (unsigned i = 0; i < x.reports.size(); ++i) {
    const progress& p = x.reports[i];
    auto out = reports[i];
    out.setWorker(p.worker);
    detail::write_chunk(out.initChunk(), p.chunk);
    out.setLossSum(p.loss_sum);
    out.setComputeS(p.compute_s);
    out.setWallS(p.wall_s);
    out.setStaleness(p.staleness);
    out.setClock(p.clock);
    out.setSkipped(p.skipped);
    out.setPushedBytes(p.pushed_bytes);
    auto skipped = out.initSkippedLocal(p.skipped_local.size());
    for (unsigned k = 0; k < p.skipped_local.size(); ++k) skipped.set(k, p.skipped_local[k]);
  }
  return detail::to_wire(message);
}

template <>
caf::expected<progress_batch> decode<progress_batch>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::ProgressBatch, progress_batch>(
      w, limits,
      [](schema::ProgressBatch::Reader in, decode_budget& budget) -> caf::expected<progress_batch> {
        const auto reports = in.getReports();
        if (reports.size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "progress: too many reports");
        progress_batch x;
        // A diverged worker may report a non-finite loss: that is information, not corruption.
        for (auto p : reports) {
          x.reports.push_back(progress{
              p.getWorker(), detail::read_chunk(p.getChunk()), p.getLossSum(), p.getComputeS(),
              p.getWallS(), p.getStaleness(), p.getClock(), p.getSkipped(), p.getPushedBytes()});
          uint32_t after = 0;  // the indexes rise, inside the chunk
          for (uint32_t k : p.getSkippedLocal()) {
            if (k < after || k >= x.reports.back().chunk.count)
              return make_error(errc::malformed_message, "progress: bad skipped local steps");
            x.reports.back().skipped_local.push_back(k);
            after = k + 1;
          }
        }
        return x;
      });
}

wire encode(const job_report& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::JobReport>();
  out.setTestAccuracy(x.test_accuracy);
  out.setSteps(x.steps);
  out.setWallS(x.wall_s);
  out.setUpdatesApplied(x.updates_applied);
  out.setUpdatesRejected(x.updates_rejected);
  out.setMaxStaleness(x.max_staleness);
  out.setMeanStaleness(x.mean_staleness);
  out.setRestarts(x.restarts);
  auto lost = out.initWorkersLost(x.workers_lost.size());
  for (unsigned i = 0; i < x.workers_lost.size(); ++i) lost.set(i, x.workers_lost[i]);
  detail::write_epochs(out.initEpochs(x.epochs.size()), x.epochs);
  out.setStalenessP50(x.staleness_p50);
  out.setStalenessP99(x.staleness_p99);
  out.setMaxClockGap(x.max_clock_gap);
  auto workers = out.initWorkers(x.workers.size());
  for (unsigned i = 0; i < x.workers.size(); ++i) {
    workers[i].setName(x.workers[i].name);
    workers[i].setSteps(x.workers[i].steps);
    workers[i].setUtilization(x.workers[i].utilization);
  }
  auto figures = out.initFigures(x.figures.size());
  for (unsigned i = 0; i < x.figures.size(); ++i) {
    figures[i].setName(x.figures[i].first);
    figures[i].setValue(x.figures[i].second);
  }
  return detail::to_wire(message);
}

template <>
caf::expected<job_report> decode<job_report>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::JobReport, job_report>(
      w, limits,
      [](schema::JobReport::Reader in, decode_budget& budget) -> caf::expected<job_report> {
        job_report x;
        x.test_accuracy = in.getTestAccuracy();
        x.steps = in.getSteps();
        x.wall_s = in.getWallS();
        x.updates_applied = in.getUpdatesApplied();
        x.updates_rejected = in.getUpdatesRejected();
        x.max_staleness = in.getMaxStaleness();
        x.mean_staleness = in.getMeanStaleness();
        x.restarts = in.getRestarts();
        const auto lost = in.getWorkersLost();
        const auto epochs = in.getEpochs();
        if (lost.size() + epochs.size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "report: too many entries");
        for (auto name : lost) {
          auto text = detail::read_text(name, budget, "worker name");
          if (!text) return std::move(text.error());
          x.workers_lost.push_back(std::move(*text));
        }
        x.epochs = detail::read_epochs(epochs);
        x.staleness_p50 = in.getStalenessP50();
        x.staleness_p99 = in.getStalenessP99();
        x.max_clock_gap = in.getMaxClockGap();
        const auto workers = in.getWorkers();
        if (workers.size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "report: too many workers");
        for (auto w : workers) {
          auto name = detail::read_text(w.getName(), budget, "worker name");
          if (!name) return std::move(name.error());
          x.workers.push_back(worker_entry{std::move(*name), w.getSteps(), w.getUtilization()});
        }
        const auto figures = in.getFigures();
        if (figures.size() > budget.limits.max_list)
          return make_error(errc::message_too_large, "report: too many figures");
        for (auto f : figures) {
          auto name = detail::read_text(f.getName(), budget, "figure name");
          if (!name) return std::move(name.error());
          x.figures.emplace_back(std::move(*name), f.getValue());
        }
        return x;
      });
}

}  // namespace troupe
