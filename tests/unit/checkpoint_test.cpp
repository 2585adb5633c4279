// Unit tests of checkpoint files and of the work plan's saved progress: a checkpoint reads
// back exactly, whole or a part at a time (saved_checkpoint, what --resume reads); only the newest `keep` files stay; a flipped byte, a truncated file or a
// foreign file is detected and reported with the part that failed, and the next older good
// checkpoint is used; a restored work plan hands out exactly the batches not yet done.
#define BOOST_TEST_MODULE checkpoint
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "actors/bucket/bucket_store.hpp"
#include "actors/ps/work_plan.hpp"
#include "actors/records/checkpoint_file.hpp"
#include "tests/support/scratch.hpp"
#include "tests/unit/expect_error.hpp"

using namespace troupe;
using troupe::testing::fails_with;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = troupe::testing::scratch(name);
  fs::remove_all(dir);
  return dir;
}

checkpoint make_checkpoint(uint64_t step) {
  bucket_spec spec{0, 2, optimizer_config{}, {}};
  spec.tensors.push_back(dense_tensor{"w", {3}, 0, {1.0f, 2.0f, float(step)}});
  bucket_store store{spec};
  checkpoint c;
  c.job.step = step;
  c.job.epochs = 2;
  c.job.batches_per_epoch = 10;
  c.job.finished = {step, 0};
  c.job.epoch_loss = {1.5, 0};
  c.job.epoch_batches = {step, 0};
  c.job.pending = {work_chunk{0, 4, 1}};
  c.buckets = {store.save(), store.save()};
  return c;
}

void flip_byte(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(at);
  f.write(&c, 1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_checkpoint_reads_back_exactly) {
  const auto dir = fresh_dir("exact");
  const auto c = make_checkpoint(3);
  auto path = write_checkpoint(dir.string(), c, 3);
  BOOST_TEST_REQUIRE(static_cast<bool>(path));
  auto back = read_checkpoint(*path);
  BOOST_TEST_REQUIRE(static_cast<bool>(back));
  BOOST_TEST(back->job.step == 3u);
  BOOST_TEST(back->job.pending.size() == 1u);
  BOOST_TEST_REQUIRE(back->buckets.size() == 2u);
  for (size_t b = 0; b < 2; ++b) {
    BOOST_TEST_REQUIRE(back->buckets[b].size() == c.buckets[b].size());
    for (size_t i = 0; i < c.buckets[b].size(); ++i)
      BOOST_TEST((back->buckets[b][i].bytes == c.buckets[b][i].bytes));
  }
  BOOST_TEST(!fs::exists(*path + ".tmp"));
}

BOOST_AUTO_TEST_CASE(a_saved_checkpoint_reads_each_part_when_asked_and_checks_it_again) {
  const auto dir = fresh_dir("saved");
  const auto c = make_checkpoint(4);
  auto path = write_checkpoint(dir.string(), c, 3);
  BOOST_TEST_REQUIRE(static_cast<bool>(path));
  auto saved = saved_checkpoint::open(*path);
  BOOST_TEST_REQUIRE(static_cast<bool>(saved));
  BOOST_TEST(saved->job.step == 4u);
  BOOST_TEST_REQUIRE(saved->buckets() == 2u);
  for (uint32_t b = 0; b < 2; ++b) {
    BOOST_TEST_REQUIRE(saved->parts(b) == c.buckets[b].size());
    for (uint32_t i = 0; i < saved->parts(b); ++i) {
      auto part = saved->part(b, i);
      BOOST_TEST_REQUIRE(static_cast<bool>(part));
      BOOST_TEST((part->bytes == c.buckets[b][i].bytes));
    }
  }
  const auto tail = saved->from(1);  // (a hybrid file's tables)
  BOOST_TEST(tail.buckets() == 1u);
  BOOST_TEST(tail.job.buckets == 1u);
  BOOST_TEST((tail.part(0, 0)->bytes == c.buckets[1][0].bytes));
  BOOST_TEST(fails_with(saved->part(2, 0), errc::malformed_message));
  // The file changed after it was checked: the part read now is refused, not used.
  flip_byte(*path, static_cast<std::streamoff>(fs::file_size(*path) - 1));
  BOOST_TEST(fails_with(saved->part(1, saved->parts(1) - 1), errc::corrupt_data));
  BOOST_TEST(fails_with(saved_checkpoint::open(*path), errc::corrupt_data));
}

BOOST_AUTO_TEST_CASE(only_the_newest_checkpoints_are_kept) {
  const auto dir = fresh_dir("keep");
  for (uint64_t step : {1, 2, 3, 4})
    BOOST_TEST_REQUIRE(static_cast<bool>(write_checkpoint(dir.string(), make_checkpoint(step), 2)));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".troupe";
  BOOST_TEST(files == 2u);
  auto newest = read_newest_checkpoint(dir.string());
  BOOST_TEST_REQUIRE(static_cast<bool>(newest));
  BOOST_TEST(newest->data.job.step == 4u);
  BOOST_TEST(newest->skipped.empty());
}

BOOST_AUTO_TEST_CASE(a_flipped_byte_anywhere_is_found_and_the_older_checkpoint_used) {
  const auto dir = fresh_dir("flip");
  BOOST_TEST_REQUIRE(static_cast<bool>(write_checkpoint(dir.string(), make_checkpoint(1), 3)));
  auto newest = write_checkpoint(dir.string(), make_checkpoint(2), 3);
  BOOST_TEST_REQUIRE(static_cast<bool>(newest));
  const auto size = static_cast<std::streamoff>(fs::file_size(*newest));
  for (std::streamoff at : {std::streamoff{3}, size / 3, size / 2, size - 1}) {
    flip_byte(*newest, at);
    BOOST_TEST(fails_with(read_checkpoint(*newest), errc::corrupt_data), "byte " << at);
    auto used = read_newest_checkpoint(dir.string());
    BOOST_TEST_REQUIRE(static_cast<bool>(used));
    BOOST_TEST(used->data.job.step == 1u);
    BOOST_TEST_REQUIRE(used->skipped.size() == 1u);
    BOOST_TEST(used->skipped[0].find("ckpt-000000000002.troupe") != std::string::npos);
    flip_byte(*newest, at);  // back as it was
  }
  BOOST_TEST(static_cast<bool>(read_checkpoint(*newest)));
}

BOOST_AUTO_TEST_CASE(a_truncated_or_foreign_file_is_refused_clearly) {
  const auto dir = fresh_dir("truncated");
  auto path = write_checkpoint(dir.string(), make_checkpoint(5), 3);
  BOOST_TEST_REQUIRE(static_cast<bool>(path));
  fs::resize_file(*path, fs::file_size(*path) - 7);
  auto got = read_checkpoint(*path);
  BOOST_TEST_REQUIRE(!got);
  BOOST_TEST(describe(got.error()).find("truncated") != std::string::npos, describe(got.error()));
  std::ofstream(*path, std::ios::trunc) << "not a checkpoint at all";
  BOOST_TEST(fails_with(read_checkpoint(*path), errc::corrupt_data));
  auto none = read_newest_checkpoint(dir.string());
  BOOST_TEST(fails_with(none, errc::io_failure));
  BOOST_TEST(fails_with(read_newest_checkpoint((dir / "missing").string()), errc::io_failure));
}

BOOST_AUTO_TEST_CASE(a_restored_work_plan_hands_out_exactly_what_was_not_done) {
  work_plan plan{2, 10, 3, 2};
  const auto a = plan.claim(0), b = plan.claim(1), c = plan.claim(0);
  BOOST_TEST_REQUIRE(plan.finish(0, a));
  job_checkpoint saved;
  plan.save(saved);
  BOOST_TEST(saved.step == 3u);
  BOOST_TEST(saved.pending.size() == 2u);  // b and c were handed out, not done
  auto resumed = work_plan::restore(saved, 1);
  std::vector<uint32_t> done(2, 0);
  for (auto chunk = resumed.claim(0); chunk.count != 0; chunk = resumed.claim(0)) {
    BOOST_TEST_REQUIRE(resumed.finish(0, chunk));
    done[chunk.epoch] += chunk.count;
  }
  BOOST_TEST(done[0] == 7u);  // 10 in epoch 1, 3 of them done before
  BOOST_TEST(done[1] == 10u);
  BOOST_TEST(resumed.epoch_complete(0));
  BOOST_TEST(resumed.epoch_complete(1));
  (void)b;
  (void)c;
}

BOOST_AUTO_TEST_CASE(leases_hand_out_every_batch_once_and_shrink_near_the_end) {
  // 3 epochs of 100 batches, chunks of 2: 150 chunks for 2 workers.
  work_plan plan{3, 100, 2, 2};
  std::vector<uint64_t> done(3, 0);
  std::vector<size_t> sizes;
  for (uint32_t w = 0;; w ^= 1) {
    const auto lease = plan.claim_lease(w, 8);
    if (lease.chunks.empty()) break;
    BOOST_TEST_REQUIRE(lease.chunks.size() <= 8u);
    sizes.push_back(lease.chunks.size());
    for (const auto& c : lease.chunks) {
      BOOST_TEST_REQUIRE(plan.finish(w, c));
      done[c.epoch] += c.count;
    }
  }
  BOOST_TEST(done == (std::vector<uint64_t>{100, 100, 100}), boost::test_tools::per_element());
  BOOST_TEST(sizes.front() == 8u);  // one claim serves several steps
  BOOST_TEST(sizes.back() == 1u);   // the last batches go one chunk at a time
  BOOST_TEST(std::is_sorted(sizes.rbegin(), sizes.rend()));
  BOOST_TEST(plan.unclaimed_chunks() == 0u);
  // A lease of a lost worker goes back whole and is handed out first.
  work_plan again{1, 40, 1, 2};
  const auto held = again.claim_lease(0, 8);
  BOOST_TEST_REQUIRE(held.chunks.size() == 8u);
  BOOST_TEST(again.release(0) == 8u);
  const auto next = again.claim_lease(1, 8);
  BOOST_TEST_REQUIRE(!next.chunks.empty());
  BOOST_TEST((next.chunks.front() == held.chunks.front()));
}
