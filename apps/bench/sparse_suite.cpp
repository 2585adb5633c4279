// troupe-bench sparse: pulling then pushing embedding rows (16 floats each, ids drawn with a
// power law, so hot rows repeat) through a bucket with a table in a peer process, against the
// dense push+pull figure for the same bytes measured in the same run.
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <cmath>
#include <random>
#include <set>

#include "apps/bench/peer.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/net.hpp"

namespace troupe::bench {

namespace {

constexpr auto timeout = std::chrono::seconds(60);
constexpr uint32_t row_dim = 16;

// `n` distinct ids drawn with P(rank r) ~ 1/r over a million ids (sorted, as workers send them).
std::vector<uint64_t> power_law_ids(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::set<uint64_t> ids;
  while (ids.size() < n) {
    const double u = static_cast<double>(gen() >> 11) * 0x1p-53;
    ids.insert(static_cast<uint64_t>(std::exp(u * std::log(1e6))));  // log-uniform: Zipf(1)
  }
  return {ids.begin(), ids.end()};
}

std::optional<bucket_actor> host(caf::scoped_actor& self, const server_actor& host_actor,
                                 const bucket_spec& spec) {
  std::optional<bucket_actor> out;
  self->request(host_actor, timeout, host_atom_v, encode(spec))
      .receive([&](bucket_actor& b) { out = std::move(b); }, [](caf::error&) {});
  return out;
}

timing pull_push(caf::scoped_actor& self, const bucket_actor& bucket, const wire& pull,
                 const wire& push, int reps) {
  return measure(1, reps, [&] {
    self->request(bucket, timeout, pull_atom_v, pull)
        .receive([](const wire& w) { (void)decode<pull_reply>(w); }, [](caf::error&) {});
    self->request(bucket, timeout, push_atom_v, push)
        .receive([](const wire& w) { (void)decode<push_ack>(w); }, [](caf::error&) {});
  });
}

}  // namespace

suite_result run_sparse(const options& o) {
  caf::actor_system_config cfg;
  configure_bench_system(cfg, o.tls_dir);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  suite_result result{"sparse", {}};
  peer_process peer;
  const auto ports = peer_process::start(o, peer);
  if (!ports) return result;
  auto host_actor = net::remote_actor<server_actor>(sys, "127.0.0.1", ports->host, peer_timeout);
  if (!host_actor) return result;
  for (size_t rows : {size_t{256}, size_t{4096}, size_t{65536}}) {
    const auto ids = power_law_ids(rows, rows);
    bucket_spec table_spec{0, 1};
    table_spec.tables.push_back(table_config{"emb", row_dim, 0.01f, uint64_t{1} << 22});
    table_spec.optimizer.type = optimizer_config::kind::sgd;
    const size_t n = rows * row_dim;
    bucket_spec dense_spec{0, 1};
    dense_spec.optimizer.type = optimizer_config::kind::sgd;
    dense_spec.tensors.push_back(
        dense_tensor{"t", {static_cast<uint32_t>(n)}, 0, random_values(n, 3)});
    auto table = host(self, *host_actor, table_spec);
    auto dense = host(self, *host_actor, dense_spec);
    if (!table || !dense) break;
    push_request sparse_push{0, 0, 0, vector_clock{1}};
    sparse_push.sparse.push_back(sparse_rows{"emb", row_dim, ids, random_values(n, 4, 1e-3f)});
    push_request dense_push{0, 0, 0, vector_clock{1}};
    dense_push.dense.push_back(
        dense_tensor{"t", {static_cast<uint32_t>(n)}, 0, random_values(n, 5, 1e-3f)});
    row r{"pull+push " + std::to_string(rows) + " rows x16", "rows/s"};
    fill_rate(r,
              pull_push(self, *table, encode(pull_request{0, 0, 0, {row_request{"emb", ids}}}),
                        encode(sparse_push), o.reps),
              double(rows));
    r.limit =
        double(rows) /
        pull_push(self, *dense, encode(pull_request{0, 0, 0}), encode(dense_push), o.reps).median_s;
    r.limit_name = "dense, same bytes";
    result.rows.push_back(r);
  }
  return result;
}

}  // namespace troupe::bench
