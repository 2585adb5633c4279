// The batches of a job, handed to workers in chunks as they ask for them: epoch by epoch, in
// order, so faster workers simply do more. Chunks that a lost worker held go back to the
// front of the line. Pure bookkeeping owned by the coordinator; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "messages/types.hpp"

namespace troupe {

class work_plan {
 public:
  work_plan(uint32_t epochs, uint64_t batches_per_epoch, uint32_t chunk, uint32_t workers);

  // The next chunk for `worker`; count 0 when nothing is left to hand out.
  work_chunk claim(uint32_t worker);

  // Up to `most` next chunks for `worker` (none when nothing is left), fewer as the job nears
  // its end: a share of what is left (guided self-scheduling), so that one claim serves
  // several steps while no worker holds back the last batches that others could do.
  work_lease claim_lease(uint32_t worker, uint32_t most);

  // Records that `worker` finished `chunk`; false (and nothing recorded) if it did not hold it.
  bool finish(uint32_t worker, const work_chunk& chunk);

  // `worker` is gone: the chunks it held are handed out again before anything else. Returns
  // the number of batches that went back.
  uint64_t release(uint32_t worker);

  // Counts every returned, unclaimed chunk as finished (when nobody is left to do them) and
  // returns how many batches were given up.
  uint64_t abandon_returned();

  // Room for one more worker (a late joiner); returns its rank.
  uint32_t add_worker() {
    held_.emplace_back();
    return static_cast<uint32_t>(held_.size() - 1);
  }

  // The plan's progress, for a checkpoint: chunks handed out or returned count as not done.
  void save(job_checkpoint& out) const;

  // A plan that goes on from `saved` (checked by the codec) with `workers` workers: the
  // chunks not done there are handed out first.
  static work_plan restore(const job_checkpoint& saved, uint32_t workers);

  // A plan restored from an old coordinator's last state (every chunk it had handed out is
  // returned here) learns from a worker that rejoined after a takeover what it holds and what
  // it finished. Chunks handed out after that state (beyond this plan's next chunk) are
  // counted too; the ones between that nobody names are handed out again. Returns the indices
  // in `finished` of the chunks this plan had not counted yet.
  std::vector<size_t> adopt(uint32_t worker, const std::vector<work_chunk>& held,
                            const std::vector<work_chunk>& finished);

  // Batches finished (or given up) so far, in all epochs.
  uint64_t finished_batches() const;

  bool epoch_complete(uint32_t epoch) const;
  // Chunks not handed out yet: returned ones and those of the batches not reached.
  uint64_t unclaimed_chunks() const;
  uint64_t batches_per_epoch() const { return per_epoch_; }

 private:
  // Takes `c` out of the returned chunks, or out of those not yet handed out (returning the
  // ones before it); false when it is neither (already counted, or another worker's).
  bool take(const work_chunk& c);

  uint32_t epochs_;
  uint64_t per_epoch_;
  uint32_t chunk_;
  uint32_t next_epoch_ = 0;
  uint64_t next_batch_ = 0;
  std::deque<work_chunk> returned_;
  std::vector<std::vector<work_chunk>> held_;  // per worker: handed out, not yet finished
  std::vector<uint64_t> finished_;             // per epoch: batches finished (or given up)
};

}  // namespace troupe
