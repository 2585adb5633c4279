// troupe-bench allreduce --members N: bus bandwidth of N member processes on loopback summing
// 1, 4, 25 and 100 MiB of fp32. Rows per backend of ours (`gloo`, `actors`: the
// allreduce_group actor a dp worker uses, requests and all), each beside Gloo's own allreduce
// (gloo::allreduce, its default ring) called directly by the same processes in the same run, whose
// rows have backend `gloo-library`; plus one raw loopback TCP stream; and our gloo group summing
// the same fp32 values packed as bf16 and as 1-bit (with error feedback, as 1-bit Adam sends its
// momentum), each beside our fp32 gloo row, with the bytes each member puts on the wire. busbw =
// fp32 bytes / time x 2 (N - 1) / N, as nccl-tests define it (for the packed rows: the fp32
// values summed per second). The members find each other through a file_store in a temporary
// directory.
#include <fcntl.h>
#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>
#include <tuple>

#include "actors/dp/trainer/allreduce_group.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/error.hpp"
#include "troupe/node.hpp"

extern char** environ;

namespace troupe::bench {

namespace {

const std::vector<uint32_t> sizes_mib = {1, 4, 25, 100};

// The rows' `compression`: none, bf16, onebit.
const char* compression_name(kernels::wire_codec c) {
  return c == kernels::wire_codec::fp32 ? "none" : kernels::to_string(c);
}

void sum_floats(void* out, const void* a, const void* b, size_t n) {
  gloo::sum<float>(out, a, b, n);
}

// Times Gloo's own allreduce (a context of its own) and ours (an allreduce_group actor formed
// over a file_store) alternately, one repetition each in turn, so that both see the same
// machine. Prints "BACKEND COMPRESSION MIB median min max WIRE_BYTES" (seconds; bytes this
// member sent in one call) per size.
caf::error time_both(const std::string& dir, uint32_t rank, uint32_t members, int reps,
                     std::ostream& out) {
  gloo::rendezvous::FileStore library_store(dir + "/library");
  auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
  auto context = std::make_shared<gloo::rendezvous::Context>(int(rank), int(members));
  context->setTimeout(std::chrono::seconds(120));
  context->connectFullMesh(library_store, device);
  caf::actor_system_config cfg;
  configure_actor_system(cfg, launch_options{});
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  // Our backends, each an allreduce_group actor as a dp worker has.
  const std::vector<collective_kind> backends = {collective_kind::gloo, collective_kind::actors};
  std::vector<allreduce_group_actor> groups;
  caf::error failed;
  for (const collective_kind backend : backends) {
    groups.push_back(sys.spawn<caf::detached>(allreduce_group, logger{"bench", log_level::warn}));
    auto form = std::make_shared<group_form>();
    form->rank = rank;
    form->size = members;
    form->generation = 1;
    form->key = 7;
    form->collective = backend;
    form->timeout = std::chrono::seconds(120);
    form->store = std::make_shared<file_store>(dir + "/" + to_string(backend));
    self->request(groups.back(), std::chrono::seconds(300), form_atom_v,
                  std::shared_ptr<const group_form>{form})
        .receive([](bool) {}, [&](caf::error& err) { failed = err; });
  }
  // What each of our timed calls runs: the group (by index) and how the values travel.
  struct variant {
    size_t group;
    kernels::wire_codec codec;
  };
  const std::vector<variant> variants = {{0, kernels::wire_codec::fp32},
                                         {1, kernels::wire_codec::fp32},
                                         {0, kernels::wire_codec::bf16},
                                         {0, kernels::wire_codec::onebit}};
  uint32_t tag = 0;
  for (uint32_t mib : sizes_mib) {
    if (failed) break;
    auto data = random_values(size_t{mib} << 18, rank + 1);
    std::vector<float> worker_error(data.size(), 0.0f),
        server_error(compressed_chunk(data.size(), members), 0.0f);
    std::vector<uint64_t> wire_bytes(1 + variants.size(), 0);
    auto library = [&] {
      gloo::AllreduceOptions o(context);
      o.setOutput(data.data(), data.size());
      o.setReduceFunction(&sum_floats);
      gloo::allreduce(o);
    };
    auto ours = [&](size_t k) {
      const auto& v = variants[k - 1];
      auto order = std::make_shared<reduce_order>(reduce_order{std::span<float>(data), ++tag});
      order->codec = v.codec;
      if (v.codec == kernels::wire_codec::onebit) order->errors = {worker_error, server_error};
      self->request(groups[v.group], std::chrono::seconds(300), reduce_atom_v,
                    std::shared_ptr<const reduce_order>{order})
          .receive([&](const reduce_done& done) { wire_bytes[k] = done.bytes; },
                   [&](caf::error& err) { failed = err; });
    };
    wire_bytes[0] = uint64_t(2.0 * (members - 1) / members * double(data.size() * 4));
    std::vector<std::vector<double>> seconds(1 + variants.size());  // the library, then ours
    for (int i = 0; i < reps + 3; ++i) {                            // the first 3 warm up
      auto began = std::chrono::steady_clock::now();
      for (size_t k = 0; k < seconds.size(); ++k) {
        if (k == 0)
          library();
        else
          ours(k);
        const auto ended = std::chrono::steady_clock::now();
        if (i >= 3) seconds[k].push_back(std::chrono::duration<double>(ended - began).count());
        began = ended;
      }
    }
    for (size_t k = 0; k < seconds.size(); ++k) {
      auto& v = seconds[k];
      std::sort(v.begin(), v.end());
      const auto codec = k == 0 ? kernels::wire_codec::fp32 : variants[k - 1].codec;
      out << fmt::format("{} {} {} {} {} {} {}\n",
                         k == 0 ? "gloo-library" : to_string(backends[variants[k - 1].group]),
                         compression_name(codec), mib, v[v.size() / 2], v.front(), v.back(),
                         wire_bytes[k]);
    }
  }
  for (auto& group : groups) self->send_exit(group, caf::exit_reason::user_shutdown);
  return failed;
}

// One raw TCP stream on loopback moving `bytes`: its rate in bytes per second.
double loopback_tcp(size_t bytes) {
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  if (::bind(server, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
      ::listen(server, 1) != 0 ||
      ::getsockname(server, reinterpret_cast<sockaddr*>(&at), &len) != 0)
    return 0;
  std::vector<char> buffer(size_t{4} << 20, 1);
  std::thread sender([&] {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0)
      for (size_t sent = 0; sent < bytes;) {
        const ssize_t n = ::send(s, buffer.data(), std::min(buffer.size(), bytes - sent), 0);
        if (n <= 0) break;
        sent += size_t(n);
      }
    ::close(s);
  });
  const int c = ::accept(server, nullptr, nullptr);
  std::vector<char> in(size_t{4} << 20);
  const auto began = std::chrono::steady_clock::now();
  size_t got = 0;
  for (ssize_t n; (n = ::recv(c, in.data(), in.size(), 0)) > 0;) got += size_t(n);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  sender.join();
  ::close(c);
  ::close(server);
  return got == bytes && s > 0 ? double(bytes) / s : 0;
}

pid_t start_member(const options& o, const std::string& dir, uint32_t rank, uint32_t members,
                   const std::string& out_path) {
  return spawn_logged({o.self_binary, "allreduce-member", dir, std::to_string(rank),
                       std::to_string(members), std::to_string(o.reps)},
                      out_path);
}

}  // namespace

int serve_allreduce_member(const std::string& dir, uint32_t rank, uint32_t members, int reps) {
  std::ostringstream out;
  try {
    if (auto err = time_both(dir, rank, members, reps, out)) {
      fmt::print(stderr, "member {}: {}\n", rank, describe(err));
      return 1;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "member {}: gloo: {}\n", rank, e.what());
    return 1;
  }
  fmt::print("{}", out.str());
  return 0;
}

suite_result run_allreduce(const options& o, uint32_t members) {
  suite_result result{"allreduce", {}};
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("troupe-allreduce-{}", ::getpid());
  fs::create_directories(dir / "library");
  fs::create_directories(dir / "gloo");
  fs::create_directories(dir / "actors");
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < members; ++r)
    pids.push_back(
        start_member(o, dir.string(), r, members, (dir / fmt::format("out{}", r)).string()));
  bool ok = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  for (pid_t pid : pids) ok = wait_for_exit(pid, deadline) && ok;
  std::ifstream in(dir / "out0");
  struct figures {
    timing t;
    uint64_t wire_bytes = 0;
  };
  std::map<std::tuple<std::string, std::string, uint32_t>, figures> times;
  std::string backend, compression;
  uint32_t mib = 0;
  figures f;
  while (in >> backend >> compression >> mib >> f.t.median_s >> f.t.min_s >> f.t.max_s >>
         f.wire_bytes)
    times[{backend, compression, mib}] = f;
  fs::remove_all(dir);
  if (!ok || times.empty()) return result;
  const double tcp = loopback_tcp(size_t{1} << 30) / 1e9;
  const double factor = 2.0 * (members - 1) / members;
  auto make_row = [&](const std::string& name, const std::string& packed, uint32_t size,
                      double limit, const std::string& is) {
    const auto& x = times[{name, packed, size}];
    const std::string label = packed == "none" ? name : name + " " + packed;
    row r{fmt::format("{} {} MiB x{}", label, size, members), "GB/s busbw"};
    const double bytes = double(size_t{size} << 20) * factor / 1e9;
    fill_rate(r, x.t, bytes);
    r.limit = limit;
    r.limit_name = is;
    r.extra = {{"backend", "\"" + name + "\""},
               {"compression", "\"" + packed + "\""},
               {"wire_bytes", std::to_string(x.wire_bytes)},
               {"members", std::to_string(members)},
               {"mib", std::to_string(size)},
               {"busbw_gbs", fmt::format("{:.6g}", r.ours)}};
    return r;
  };
  for (uint32_t size : sizes_mib) {
    auto library = make_row("gloo-library", "none", size, tcp, "loopback TCP stream");
    auto fp32 = make_row("gloo", "none", size, library.ours, "gloo::allreduce, same run");
    for (const char* packed : {"bf16", "onebit"})
      result.rows.push_back(make_row("gloo", packed, size, fp32.ours, "our fp32 gloo, same run"));
    result.rows.push_back(std::move(fp32));
    result.rows.push_back(
        make_row("actors", "none", size, library.ours, "gloo::allreduce, same run"));
    result.rows.push_back(std::move(library));
  }
  row stream{"loopback TCP stream 1 GiB", "GB/s", tcp, tcp, tcp, tcp, "itself"};
  stream.extra = {{"backend", "\"tcp\""},
                  {"compression", "\"none\""},
                  {"wire_bytes", std::to_string(size_t{1} << 30)},
                  {"members", "2"},
                  {"mib", "1024"},
                  {"busbw_gbs", fmt::format("{:.6g}", tcp)}};
  result.rows.push_back(std::move(stream));
  return result;
}

}  // namespace troupe::bench
