// troupe-bench state [--size N] [--reps R]: moving a dp member's whole state (a flat Adam store
// of N values, default 64 Mi: values and two moments, 768 MiB), each beside the limit measured
// in the same run:
//  - the hand-over of a new generation (agree_on_state, two members as threads over Gloo on
//    loopback, one behind), beside Gloo's own broadcast of the same bytes in one call;
//  - a checkpoint written (bucket_store::save_each into a checkpoint_writer, fsync included)
//    beside `dd conv=fdatasync` of the same bytes, and read back (read_checkpoint and the
//    store's restore) beside `dd` reading that file (both from the page cache).
// Rates in GB/s of the state's bytes.
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "actors/dp/collective/gloo_collective.hpp"
#include "actors/dp/trainer/store_pieces.hpp"
#include "actors/records/checkpoint_file.hpp"
#include "apps/bench/suites.hpp"
#include "troupe/error.hpp"

namespace troupe::bench {

namespace {

namespace fs = std::filesystem;

bucket_store flat_store(uint32_t n, float fill) {
  optimizer_config adam;
  bucket_spec spec{0, 1, adam, {}};
  spec.values_follow = true;
  spec.tensors.push_back(dense_tensor{"(flat)", {n}, 0, {}});
  bucket_store store{std::move(spec)};
  auto v = store.set_values(0);
  std::fill(v.begin(), v.end(), fill);
  return store;
}

std::vector<dense_tensor> shapes_of(const bucket_store& s) {
  return {dense_tensor{s.slices()[0].name, s.slices()[0].shape, 0, {}}};
}

uint64_t state_bytes(const bucket_store& s) {
  uint64_t bytes = 0;
  for (auto a : s.arrays()) bytes += a.size_bytes();
  return bytes;
}

// Two members (threads) over one memory_store run `body(collective, rank)` `reps` times each,
// interleaved: the hand-over and Gloo's broadcast in turn. Seconds per repetition per case.
std::vector<timing> time_hand_over(uint32_t n, int reps) {
  memory_store store;
  std::vector<std::vector<double>> seconds(2);
  std::vector<std::thread> ranks;
  const auto timeout = std::chrono::seconds(600);
  for (uint32_t r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto c = make_gloo_collective(store, gloo_options{r, 2, "127.0.0.1", "state/", timeout});
      if (!c) return;
      std::optional<bucket_store> own = flat_store(n, r == 0 ? 1.0f : 0.0f);
      const auto shapes = shapes_of(*own);
      std::vector<float> raw(state_bytes(*own) / sizeof(float), float(r));
      for (int k = 0; k < reps + 1; ++k) {  // the first round warms up
        (*c)->barrier(collective_call{1, timeout});
        auto began = std::chrono::steady_clock::now();
        auto pieces = std::make_shared<store_pieces>(std::move(own), shapes, update_rules{});
        auto agreed = agree_on_state(**c, sync_order{r == 0 ? 5u : 1u, pieces}, timeout);
        own = std::move(*pieces).result();
        if (!agreed || !own) return;
        const double hand_over =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        (*c)->barrier(collective_call{2, timeout});
        began = std::chrono::steady_clock::now();
        if ((*c)->broadcast(raw, 0, collective_call{3, timeout})) return;
        const double gloo =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        if (r == 1 && k > 0) seconds[0].push_back(hand_over), seconds[1].push_back(gloo);
      }
    });
  for (auto& t : ranks) t.join();
  std::vector<timing> out;
  for (auto& s : seconds) {
    if (s.empty()) return {};
    std::sort(s.begin(), s.end());
    out.push_back(timing{s[s.size() / 2], s.front(), s.back()});
  }
  return out;
}

double run_shell(const std::string& command) {
  const auto began = std::chrono::steady_clock::now();
  if (std::system(command.c_str()) != 0) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
}

row checkpoint_row(const std::string& name, const std::vector<double>& ours,
                   const std::vector<double>& dd, double gb, const std::string& limit) {
  auto median = [](std::vector<double> xs) {
    std::sort(xs.begin(), xs.end());
    return xs[xs.size() / 2];
  };
  row r{name, "GB/s"};
  fill_rate(r,
            timing{median(ours), *std::min_element(ours.begin(), ours.end()),
                   *std::max_element(ours.begin(), ours.end())},
            gb);
  r.limit = gb / median(dd);
  r.limit_name = limit;
  return r;
}

// Writes and reads checkpoints of the store in `dir`, each beside dd; two rows.
std::vector<row> time_checkpoints(const bucket_store& store, const fs::path& dir, int reps) {
  const double gb = double(state_bytes(store)) / 1e9;
  std::vector<double> write_s, read_s, dd_write_s, dd_read_s;
  const auto mib = state_bytes(store) >> 20;
  const auto dd_file = (dir / "dd.bin").string();
  for (int k = 0; k < reps; ++k) {
    job_checkpoint job;
    job.step = uint64_t(k + 1);
    auto began = std::chrono::steady_clock::now();
    auto writer = checkpoint_writer::open(dir.string(), job, 1, 1);
    if (!writer) return {};
    if (store.save_each([&](wire w) { return writer->add(0, std::move(w)); })) return {};
    auto path = writer->finish();
    if (!path) return {};
    write_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    began = std::chrono::steady_clock::now();
    auto back = read_checkpoint(*path);
    if (!back) return {};
    auto restored = bucket_store::restore(back->buckets[0]);
    if (!restored) return {};
    read_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
    dd_write_s.push_back(run_shell(fmt::format(
        "dd if=/dev/zero of={} bs=1M count={} conv=fdatasync status=none", dd_file, mib)));
    dd_read_s.push_back(run_shell(fmt::format("dd if={} of=/dev/null bs=1M status=none", dd_file)));
  }
  fs::remove(dd_file);
  return {checkpoint_row("checkpoint write (fsync)", write_s, dd_write_s, gb, "dd conv=fdatasync"),
          checkpoint_row("checkpoint read + restore", read_s, dd_read_s, gb, "dd read (cached)")};
}

}  // namespace

suite_result run_state(const options& o) {
  suite_result out{"state"};
  const auto n = static_cast<uint32_t>(o.size ? o.size : (size_t{64} << 20));
  const int reps = std::min(o.reps, 5);
  const double gb = 12.0 * n / 1e9;
  const auto times = time_hand_over(n, reps);
  if (times.size() == 2) {
    row r{fmt::format("hand-over {:.2f} GB (2 members)", gb), "GB/s"};
    fill_rate(r, times[0], gb);
    r.limit = gb / times[1].median_s;
    r.limit_name = "gloo broadcast";
    out.rows.push_back(r);
  }
  const auto dir = fs::temp_directory_path() / fmt::format("troupe-bench-state-{}", ::getpid());
  fs::create_directories(dir);
  for (auto& r : time_checkpoints(flat_store(n, 0.5f), dir, reps)) out.rows.push_back(r);
  fs::remove_all(dir);
  return out;
}

}  // namespace troupe::bench
