// Codec for the standby coordinator: the state a standby follows (coordinator_standing, with a
// data-parallel job's part) and a member's registration with the coordinator that took over
// (rejoin_request).
#include "messages/codec_detail.hpp"

namespace troupe {

using detail::decode_budget;

namespace {

// Members, buckets and list entries one standing may name: well above any job's.
constexpr size_t max_members = 1 << 16;

void write_texts(capnp::List<capnp::Text>::Builder out, const std::vector<std::string>& in) {
  for (unsigned i = 0; i < in.size(); ++i) out.set(i, in[i]);
}

caf::expected<std::vector<std::string>> read_texts(capnp::List<capnp::Text>::Reader in,
                                                   const decode_budget& budget, const char* what) {
  if (in.size() > max_members) return make_error(errc::message_too_large, what);
  std::vector<std::string> out;
  for (auto t : in) {
    auto text = detail::read_text(t, budget, what);
    if (!text) return std::move(text.error());
    out.push_back(std::move(*text));
  }
  return out;
}

void write_member(schema::MemberStanding::Builder out, const member_standing& x) {
  out.setName(x.name);
  detail::write_endpoint(out.initData(), x.data);
  out.setLost(x.lost);
  out.setDone(x.done);
  out.setDraining(x.draining);
  out.setDrained(x.drained);
  out.setSteps(x.steps);
  out.setClock(x.clock);
  out.setComputeS(x.compute_s);
  out.setWallS(x.wall_s);
}

caf::expected<std::vector<member_standing>> read_members(
    capnp::List<schema::MemberStanding>::Reader in, const decode_budget& budget) {
  if (in.size() > max_members) return make_error(errc::message_too_large, "standing: members");
  std::vector<member_standing> out;
  for (auto m : in) {
    auto name = detail::read_text(m.getName(), budget, "member name");
    if (!name) return std::move(name.error());
    auto data = detail::read_endpoint(m.getData(), budget);
    if (!data) return std::move(data.error());
    out.push_back(member_standing{std::move(*name), std::move(*data), m.getLost(), m.getDone(),
                                  m.getDraining(), m.getDrained(), m.getSteps(), m.getClock(),
                                  m.getComputeS(), m.getWallS()});
  }
  return out;
}

void write_losses(capnp::List<schema::LossEvent>::Builder out, const std::vector<loss_event>& in) {
  for (unsigned i = 0; i < in.size(); ++i) {
    out[i].setName(in[i].name);
    out[i].setRole(detail::write_role(in[i].kind));
    out[i].setAtS(in[i].at_s);
    out[i].setAtUnixMs(in[i].at_unix_ms);
    out[i].setReason(in[i].reason);
  }
}

caf::expected<std::vector<loss_event>> read_losses(capnp::List<schema::LossEvent>::Reader in,
                                                   const decode_budget& budget) {
  if (in.size() > max_members) return make_error(errc::message_too_large, "standing: losses");
  std::vector<loss_event> out;
  for (auto l : in) {
    auto name = detail::read_text(l.getName(), budget, "member name");
    auto kind = detail::read_role(l.getRole());
    auto reason = detail::read_text(l.getReason(), budget, "loss reason");
    if (!name) return std::move(name.error());
    if (!kind) return std::move(kind.error());
    if (!reason) return std::move(reason.error());
    out.push_back(loss_event{std::move(*name), *kind, l.getAtS(), l.getAtUnixMs(), *reason});
  }
  return out;
}

void write_dp(schema::DpStanding::Builder out, const dp_group_standing& x) {
  out.setGeneration(x.generation);
  out.setGlobalBatch(x.global_batch);
  write_texts(out.initHosts(x.hosts.size()), x.hosts);
  auto put = [](auto list, const std::vector<uint64_t>& in) {
    for (unsigned i = 0; i < in.size(); ++i) list.set(i, in[i]);
  };
  put(out.initExamples(x.examples.size()), x.examples);
  put(out.initStepExamples(x.step_examples.size()), x.step_examples);
  put(out.initAppliedExamples(x.applied_examples.size()), x.applied_examples);
  auto names = out.initFigureNames(x.figures.size());
  auto values = out.initFigureValues(x.figures.size());
  for (unsigned i = 0; i < x.figures.size(); ++i) {
    names.set(i, x.figures[i].first);
    values.set(i, x.figures[i].second);
  }
  out.setAllreduceBytes(x.allreduce_bytes);
  out.setBytesInterHost(x.bytes_inter_host);
  out.setBytesWarmup(x.bytes_warmup);
  out.setBytesCompressed(x.bytes_compressed);
  out.setStepsWarmup(x.steps_warmup);
  out.setStepsCompressed(x.steps_compressed);
  out.setSkippedSteps(x.skipped_steps);
  out.setChecksumMismatches(x.checksum_mismatches);
  out.setCheckpoints(x.checkpoints);
  out.setAllreduceS(x.allreduce_s);
  out.setExposedS(x.exposed_s);
  out.setReformS(x.reform_s);
}

// The data-parallel part; its per-member lists must match the standing's `members` workers.
caf::expected<dp_group_standing> read_dp(schema::DpStanding::Reader in, size_t members,
                                         const decode_budget& budget) {
  dp_group_standing x;
  auto hosts = read_texts(in.getHosts(), budget, "host label");
  auto names = read_texts(in.getFigureNames(), budget, "figure name");
  if (!hosts) return std::move(hosts.error());
  if (!names) return std::move(names.error());
  if (in.getAppliedExamples().size() > budget.limits.max_list)
    return make_error(errc::message_too_large, "standing: epochs");
  x.hosts = std::move(*hosts);
  x.examples = detail::to_vector<uint64_t>(in.getExamples());
  x.step_examples = detail::to_vector<uint64_t>(in.getStepExamples());
  x.applied_examples = detail::to_vector<uint64_t>(in.getAppliedExamples());
  const auto values = detail::to_vector<double>(in.getFigureValues());
  if (x.hosts.size() != members || x.examples.size() != members ||
      x.step_examples.size() != members || values.size() != names->size())
    return make_error(errc::malformed_message, "standing: the group's lists differ in length");
  for (size_t i = 0; i < values.size(); ++i) x.figures.emplace_back((*names)[i], values[i]);
  x.generation = in.getGeneration();
  x.global_batch = in.getGlobalBatch();
  x.allreduce_bytes = in.getAllreduceBytes();
  x.bytes_inter_host = in.getBytesInterHost();
  x.bytes_warmup = in.getBytesWarmup();
  x.bytes_compressed = in.getBytesCompressed();
  x.steps_warmup = in.getStepsWarmup();
  x.steps_compressed = in.getStepsCompressed();
  x.skipped_steps = in.getSkippedSteps();
  x.checksum_mismatches = in.getChecksumMismatches();
  x.checkpoints = in.getCheckpoints();
  x.allreduce_s = in.getAllreduceS();
  x.exposed_s = in.getExposedS();
  x.reform_s = in.getReformS();
  return x;
}

}  // namespace

wire encode(const coordinator_standing& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Standing>();
  out.setTerm(x.term);
  out.setTraining(x.training);
  detail::write_job_checkpoint(out.initPlan(), x.plan);
  auto servers = out.initServers(x.servers.size());
  for (unsigned i = 0; i < x.servers.size(); ++i) write_member(servers[i], x.servers[i]);
  auto workers = out.initWorkers(x.workers.size());
  for (unsigned i = 0; i < x.workers.size(); ++i) write_member(workers[i], x.workers[i]);
  auto homes = out.initHomes(x.homes.size());
  for (unsigned i = 0; i < x.homes.size(); ++i) {
    homes[i].setPrimary(x.homes[i].primary);
    auto chain = homes[i].initBackups(x.homes[i].backups.size());
    for (unsigned k = 0; k < x.homes[i].backups.size(); ++k) chain.set(k, x.homes[i].backups[k]);
  }
  write_losses(out.initLosses(x.losses.size()), x.losses);
  auto takeovers = out.initTakeovers(x.takeovers.size());
  for (unsigned i = 0; i < x.takeovers.size(); ++i) {
    takeovers[i].setAtS(x.takeovers[i].at_s);
    takeovers[i].setTookS(x.takeovers[i].took_s);
    takeovers[i].setTerm(x.takeovers[i].term);
  }
  write_texts(out.initWorkersLost(x.workers_lost.size()), x.workers_lost);
  write_texts(out.initDrained(x.drained.size()), x.drained);
  write_texts(out.initWritten(x.written.size()), x.written);
  out.setRestarts(x.restarts);
  out.setEscalations(x.escalations);
  out.setSinceLast(x.since_last);
  out.setChunksDone(x.chunks_done);
  out.setResumedFromStep(x.resumed_from_step);
  out.setRecoveryS(x.recovery_s);
  out.setResumedWallS(x.resumed_wall_s);
  if (x.dp) write_dp(out.initDp(), *x.dp);
  return detail::to_wire(message);
}

template <>
caf::expected<coordinator_standing> decode<coordinator_standing>(const wire& w,
                                                                 const codec_limits& limits) {
  return detail::read_root<schema::Standing, coordinator_standing>(
      w, limits,
      [](schema::Standing::Reader in,
         decode_budget& budget) -> caf::expected<coordinator_standing> {
        coordinator_standing x;
        x.term = in.getTerm();
        x.training = in.getTraining();
        auto plan = detail::read_job_checkpoint(in.getPlan(), budget);
        auto servers = read_members(in.getServers(), budget);
        auto workers = read_members(in.getWorkers(), budget);
        auto losses = read_losses(in.getLosses(), budget);
        auto lost = read_texts(in.getWorkersLost(), budget, "worker name");
        auto drained = read_texts(in.getDrained(), budget, "node name");
        auto written = read_texts(in.getWritten(), budget, "checkpoint path");
        if (!plan) return std::move(plan.error());
        if (!servers) return std::move(servers.error());
        if (!workers) return std::move(workers.error());
        if (!losses) return std::move(losses.error());
        if (!lost) return std::move(lost.error());
        if (!drained) return std::move(drained.error());
        if (!written) return std::move(written.error());
        x.plan = std::move(*plan);
        x.servers = std::move(*servers);
        x.workers = std::move(*workers);
        x.losses = std::move(*losses);
        x.workers_lost = std::move(*lost);
        x.drained = std::move(*drained);
        x.written = std::move(*written);
        if (in.getHomes().size() > max_members || in.getTakeovers().size() > max_members)
          return make_error(errc::message_too_large, "standing: buckets");
        for (auto h : in.getHomes()) {
          home_standing home{h.getPrimary(), detail::to_vector<uint32_t>(h.getBackups())};
          bool fits = home.primary < x.servers.size() && home.backups.size() < 8;
          for (uint32_t s : home.backups) fits = fits && s < x.servers.size();
          if (!fits) return make_error(errc::malformed_message, "standing: a bucket's home");
          x.homes.push_back(std::move(home));
        }
        for (auto t : in.getTakeovers())
          x.takeovers.push_back(takeover_event{t.getAtS(), t.getTookS(), t.getTerm()});
        x.restarts = in.getRestarts();
        x.escalations = in.getEscalations();
        x.since_last = in.getSinceLast();
        x.chunks_done = in.getChunksDone();
        x.resumed_from_step = in.getResumedFromStep();
        x.recovery_s = in.getRecoveryS();
        x.resumed_wall_s = in.getResumedWallS();
        if (in.hasDp()) {
          auto dp = read_dp(in.getDp(), x.workers.size(), budget);
          if (!dp) return std::move(dp.error());
          x.dp = std::move(*dp);
        }
        return x;
      });
}

wire encode(const rejoin_request& x) {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Rejoin>();
  out.setRole(detail::write_role(x.sender));
  out.setName(x.name);
  out.setRank(x.rank);
  detail::write_endpoint(out.initData(), x.data);
  auto buckets = out.initBuckets(x.buckets.size());
  for (unsigned i = 0; i < x.buckets.size(); ++i) buckets.set(i, x.buckets[i]);
  out.setSteps(x.steps);
  out.setClock(x.clock);
  out.setComputeS(x.compute_s);
  out.setWallS(x.wall_s);
  out.setDone(x.done);
  detail::write_chunks(out.initHeld(x.held.size()), x.held);
  detail::write_chunks(out.initFinished(x.finished.size()), x.finished);
  auto loss = out.initFinishedLoss(x.finished_loss.size());
  for (unsigned i = 0; i < x.finished_loss.size(); ++i) loss.set(i, x.finished_loss[i]);
  out.setHost(x.host);
  out.setGeneration(x.generation);
  return detail::to_wire(message);
}

template <>
caf::expected<rejoin_request> decode<rejoin_request>(const wire& w, const codec_limits& limits) {
  return detail::read_root<schema::Rejoin, rejoin_request>(
      w, limits,
      [](schema::Rejoin::Reader in, decode_budget& budget) -> caf::expected<rejoin_request> {
        rejoin_request x;
        auto sender = detail::read_role(in.getRole());
        auto name = detail::read_text(in.getName(), budget, "node name");
        auto data = detail::read_endpoint(in.getData(), budget);
        auto held = detail::read_chunks(in.getHeld(), budget);
        auto finished = detail::read_chunks(in.getFinished(), budget);
        auto host = detail::read_text(in.getHost(), budget, "host label");
        if (!host) return std::move(host.error());
        if (!sender) return std::move(sender.error());
        if (!name) return std::move(name.error());
        if (!data) return std::move(data.error());
        if (!held) return std::move(held.error());
        if (!finished) return std::move(finished.error());
        if (in.getBuckets().size() > max_members || in.getFinishedLoss().size() != finished->size())
          return make_error(errc::malformed_message, "rejoin: inconsistent sizes");
        x.sender = *sender;
        x.name = std::move(*name);
        x.rank = in.getRank();
        x.data = std::move(*data);
        x.buckets = detail::to_vector<uint32_t>(in.getBuckets());
        x.steps = in.getSteps();
        x.clock = in.getClock();
        x.compute_s = in.getComputeS();
        x.wall_s = in.getWallS();
        x.done = in.getDone();
        x.held = std::move(*held);
        x.finished = std::move(*finished);
        x.finished_loss = detail::to_vector<double>(in.getFinishedLoss());
        x.host = std::move(*host);
        x.generation = in.getGeneration();
        return x;
      });
}

}  // namespace troupe
