#include "actors/dp/collective/nccl_collective.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/gpu/gpu_stream.hpp"
#include "kernels/cuda/device.hpp"
#include "troupe/error.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

std::chrono::milliseconds left_until(clock_type::time_point deadline) {
  return std::max(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()),
      std::chrono::milliseconds(1));
}

// Waits while the non-blocking communicator's last call is in progress, at most until
// `deadline` (then ncclInProgress is returned).
ncclResult_t settle(ncclComm_t comm, ncclResult_t result, clock_type::time_point deadline) {
  while (result == ncclInProgress) {
    if (clock_type::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) return ncclInternalError;
  }
  return result;
}

caf::error nccl_error(const std::string& doing, ncclResult_t result, ncclComm_t comm) {
  if (result == ncclInProgress)
    return make_error(errc::timeout,
                      fmt::format("nccl {}: not done in time (a member is lost or late)", doing));
  const char* last = ncclGetLastError(comm);  // the process's last NCCL message
  return make_error(errc::collective_failed,
                    fmt::format("nccl {}: {}{}{}", doing, ncclGetErrorString(result),
                                last && *last ? ": " : "", last ? last : ""));
}

// The communicator, shared by the collective and the jobs it queued on the stream actor, so
// that it outlives every job; once closed (a call failed or timed out, or the collective is
// gone) no job touches it any more. The lock is held only to enqueue and to close.
struct communicator {
  std::mutex lock;
  ncclComm_t comm = nullptr;
  bool closed = false;

  // Ends it: a healthy one first flushes what it still sends to its peers (ncclCommFinalize,
  // within `bound`), else, or when that fails, it is aborted (which ends kernels still
  // waiting on a lost peer). Outside the lock: a job waiting for it sees `closed`.
  void close(bool flush, std::chrono::milliseconds bound) {
    ncclComm_t c = nullptr;
    {
      std::lock_guard<std::mutex> guard{lock};
      if (!comm || closed) return;
      closed = true;
      c = comm;
    }
    if (flush && settle(c, ncclCommFinalize(c), clock_type::now() + bound) == ncclSuccess) {
      ncclCommDestroy(c);
      return;
    }
    ncclCommAbort(c);
  }
  ~communicator() { close(false, {}); }
};

// NCCL calls that enqueue one operation on `stream`: over `data` (n values) and, where the
// operation needs one, `scratch` (as many).
using nccl_op = std::function<ncclResult_t(ncclComm_t, cudaStream_t, float* data, float* scratch)>;

class nccl_collective : public collective {
 public:
  nccl_collective(caf::actor_system& sys, nccl_options o, gpu_stream_actor gpu,
                  std::shared_ptr<communicator> comm)
      : sys_(sys), o_(std::move(o)), gpu_(std::move(gpu)), comm_(std::move(comm)) {}

  ~nccl_collective() override {
    comm_->close(!spoiled_, o_.timeout);
    caf::anon_send_exit(gpu_, caf::exit_reason::user_shutdown);  // its buffers go with it
  }

  uint32_t rank() const override { return o_.rank; }
  uint32_t size() const override { return o_.size; }
  std::string backend() const override { return "nccl"; }

  caf::error allreduce(std::span<float> data, const collective_call& call) override {
    return in_pieces(data, [&](std::span<float> piece) {
      return run("allreduce", piece, call, false,
                 [n = piece.size()](auto comm, auto s, auto d, auto) {
                   return ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, s);
                 });
    });
  }

  caf::error reduce_scatter(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    const size_t each = data.size() / size();
    return run("reduce_scatter", data, call, false,
               [=, r = rank()](auto comm, auto s, auto d, auto) {
                 return ncclReduceScatter(d, d + each * r, each, ncclFloat, ncclSum, comm, s);
               });
  }

  caf::error all_gather(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    const size_t each = data.size() / size();
    return run("all_gather", data, call, false, [=, r = rank()](auto comm, auto s, auto d, auto) {
      return ncclAllGather(d + each * r, d, each, ncclFloat, comm, s);
    });
  }

  caf::error broadcast(std::span<float> data, uint32_t root, const collective_call& call) override {
    if (root >= size())
      return make_error(errc::bad_configuration,
                        fmt::format("broadcast from member {} of {}", root, size()));
    return run("broadcast", data, call, false,
               [=, n = data.size()](auto comm, auto s, auto d, auto) {
                 return ncclBroadcast(d, d, n, ncclFloat, static_cast<int>(root), comm, s);
               });
  }

  caf::error all_to_all(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    const size_t each = data.size() / size();
    return run("all_to_all", data, call, true, [=, n = size()](auto comm, auto s, auto d, auto sc) {
      auto ok = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };
      ncclResult_t result = ncclGroupStart();
      for (uint32_t j = 0; j < n && ok(result); ++j) {
        result = ncclSend(d + each * j, each, ncclFloat, static_cast<int>(j), comm, s);
        if (ok(result))
          result = ncclRecv(sc + each * j, each, ncclFloat, static_cast<int>(j), comm, s);
      }
      const ncclResult_t ended = ncclGroupEnd();  // always: a group left open spoils the next
      return ok(result) ? ended : result;
    });
  }

  caf::error barrier(const collective_call& call) override {
    float one = 1.0f;
    return allreduce(std::span<float>{&one, 1}, call);
  }

 private:
  struct buffers {
    uint64_t data = 0;
    uint64_t scratch = 0;  // 0: none
  };

  // The most values one call moves (the stream actor stages each copy whole in pinned host
  // memory, 1 GiB by default): allreduce and broadcast go in pieces of this many.
  static constexpr size_t max_call_values = size_t{1} << 26;  // 256 MiB

  template <class Piece>
  caf::error in_pieces(std::span<float> data, Piece piece) {
    for (size_t at = 0; at < data.size(); at += max_call_values)
      if (auto err = piece(data.subspan(at, std::min(max_call_values, data.size() - at))))
        return err;
    return {};
  }

  // Uploads `data`, runs `op` on the stream actor's compute stream and downloads the result
  // (from the scratch buffer when `into_scratch`) into `data`, all within the call's bound.
  // A scoped actor of its own per call: CAF 0.17 never cancels a request's timeout, so a
  // long-lived one would collect a stale timeout message for every request it made.
  caf::error run(const char* doing, std::span<float> data, const collective_call& call,
                 bool into_scratch, nccl_op op) {
    if (spoiled_) return spoiled_;
    if (data.empty()) return {};
    if (data.size() > max_call_values)
      return make_error(errc::message_too_large,
                        fmt::format("nccl {}: {} values in one call, at most {}", doing,
                                    data.size(), max_call_values));
    caf::scoped_actor self{sys_};
    const auto deadline = clock_type::now() + call.timeout;
    auto ids = buffers_for(self, data.size(), into_scratch, deadline);
    if (!ids) return spoil(std::move(ids.error()));
    auto values = std::make_shared<const std::vector<float>>(data.begin(), data.end());
    if (auto up = ask<bool>(self, deadline, doing, upload_atom_v, ids->data, host_values{values});
        !up)
      return spoil(std::move(up.error()));
    auto failure = std::make_shared<caf::error>();  // written under the communicator's lock
    gpu_work work = [comm = comm_, op = std::move(op), ids = *ids, failure, deadline,
                     what = std::string(doing)](const gpu_context& ctx) -> cudaError_t {
      std::lock_guard<std::mutex> guard{comm->lock};
      float* d = ctx.buffer(ids.data);
      float* sc = ids.scratch ? ctx.buffer(ids.scratch) : nullptr;
      if (comm->closed || !d || (ids.scratch && !sc)) {
        *failure = make_error(errc::collective_failed, "nccl " + what + ": the group is closed");
        return cudaErrorInvalidValue;
      }
      const ncclResult_t result = settle(comm->comm, op(comm->comm, ctx.compute, d, sc), deadline);
      if (result == ncclSuccess) return cudaSuccess;
      *failure = nccl_error(what, result, comm->comm);
      return cudaErrorUnknown;
    };
    if (auto ran = ask<bool>(self, deadline, doing, run_atom_v, std::move(work)); !ran) {
      caf::error why;
      {
        std::lock_guard<std::mutex> guard{comm_->lock};  // the job may still be writing it
        why = std::move(*failure);
      }
      return spoil(why ? std::move(why) : std::move(ran.error()));
    }
    auto result = ask<host_result>(self, deadline, doing, download_atom_v,
                                   into_scratch ? ids->scratch : ids->data);
    if (!result) return spoil(std::move(result.error()));
    if (!*result || (*result)->size() < data.size())
      return spoil(make_error(errc::device_failure, fmt::format("nccl {}: short download", doing)));
    std::memcpy(data.data(), (*result)->data(), data.size_bytes());
    return {};
  }

  // A request to the stream actor, answered before `deadline`.
  template <class Result, class... Ts>
  caf::expected<Result> ask(caf::scoped_actor& self, clock_type::time_point deadline,
                            const char* doing, Ts&&... xs) {
    caf::expected<Result> out = make_error(errc::timeout, "");
    const auto bound = left_until(deadline);
    self->request(gpu_, bound, std::forward<Ts>(xs)...)
        .receive([&](Result& r) { out = std::move(r); },
                 [&](caf::error& err) {
                   if (err == caf::sec::request_timeout)
                     out = make_error(errc::timeout,
                                      fmt::format("nccl {}: the GPU's stream did not answer "
                                                  "within {} ms (a member is lost or late)",
                                                  doing, bound.count()));
                   else
                     out = std::move(err);
                 });
    return out;
  }

  // Device buffers of `floats` values, kept for the next call of the same size (a job's
  // buckets come in a few sizes); at most kept_sizes sizes are kept.
  caf::expected<buffers> buffers_for(caf::scoped_actor& self, size_t floats, bool scratch,
                                     clock_type::time_point deadline) {
    constexpr size_t kept_sizes = 8;
    auto id_of = [&](std::map<size_t, uint64_t>& pool) -> caf::expected<uint64_t> {
      if (auto it = pool.find(floats); it != pool.end()) return it->second;
      if (pool.size() >= kept_sizes) {
        for (auto& [n, id] : pool) caf::anon_send(gpu_, release_atom_v, id);
        pool.clear();
      }
      auto id = ask<uint64_t>(self, deadline, "allocating", alloc_atom_v, uint64_t{floats});
      if (id) pool.emplace(floats, *id);
      return id;
    };
    auto data = id_of(data_buffers_);
    if (!data) return std::move(data.error());
    buffers out{*data, 0};
    if (scratch) {
      auto other = id_of(scratch_buffers_);
      if (!other) return std::move(other.error());
      out.scratch = *other;
    }
    return out;
  }

  // The first failure aborts the communicator. NCCL tells no peer: theirs fail at their own
  // deadline (or sooner, where NCCL's transport sees the connection go).
  caf::error spoil(caf::error err) {
    spoiled_ = err;
    comm_->close(false, {});
    return err;
  }

  caf::actor_system& sys_;
  nccl_options o_;
  gpu_stream_actor gpu_;
  std::shared_ptr<communicator> comm_;
  std::map<size_t, uint64_t> data_buffers_, scratch_buffers_;  // values -> buffer id
  caf::error spoiled_;
};

// Member 0's unique id for the communicator, through the store.
caf::expected<ncclUniqueId> unique_id(rendezvous_store& store, const nccl_options& o) {
  ncclUniqueId id{};
  const std::string key = o.prefix + "nccl-id";
  if (o.rank == 0) {
    if (auto result = ncclGetUniqueId(&id); result != ncclSuccess)
      return nccl_error("unique id", result, nullptr);
    if (auto err = store.set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal)))
      return err;
    return id;
  }
  auto value = store.get(key, o.timeout);
  if (!value) return std::move(value.error());
  if (value->size() != sizeof id.internal)
    return make_error(errc::corrupt_data, fmt::format("nccl: a unique id of {} bytes, not {}",
                                                      value->size(), sizeof id.internal));
  std::memcpy(id.internal, value->data(), sizeof id.internal);
  return id;
}

}  // namespace

caf::expected<int> nccl_devices() {
  const int devices = kernels::cuda::device_count();
  if (devices == 0)
    return make_error(errc::device_failure,
                      "no GPU is visible: --collective nccl needs one GPU per member");
  return devices;
}

caf::expected<std::unique_ptr<collective>> make_nccl_collective(caf::actor_system& sys,
                                                                rendezvous_store& store,
                                                                const nccl_options& o) {
  auto devices = nccl_devices();
  if (!devices) return std::move(devices.error());
  if (const char* blocking = std::getenv("NCCL_COMM_BLOCKING"); blocking && *blocking == '1')
    return make_error(errc::bad_configuration,
                      "nccl: NCCL_COMM_BLOCKING=1 would make NCCL's waits unbounded; unset it");
  if (o.local_rank < 0) return make_error(errc::bad_configuration, "nccl: a negative local rank");
  const int device = o.local_rank % *devices;
  if (o.size == 0 || o.rank >= o.size)
    return make_error(errc::bad_configuration, fmt::format("member {} of {}", o.rank, o.size));
  const auto deadline = clock_type::now() + o.timeout;
  auto id = unique_id(store, o);
  if (!id) return std::move(id.error());
  gpu_stream_config config;
  config.device = device;
  config.log = logger{"nccl"};
  auto gpu = spawn_gpu_stream(sys, config);
  if (!gpu) return std::move(gpu.error());
  auto comm = std::make_shared<communicator>();
  auto give_up = [&](caf::error err) {
    comm->close(false, {});
    caf::anon_send_exit(*gpu, caf::exit_reason::user_shutdown);
    return err;
  };
  if (auto err = cudaSetDevice(device))
    return give_up(make_error(errc::device_failure, fmt::format("cudaSetDevice({}): {}", device,
                                                                cudaGetErrorString(err))));
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // every wait below has the deadline
  ncclResult_t result = ncclCommInitRankConfig(&comm->comm, static_cast<int>(o.size), *id,
                                               static_cast<int>(o.rank), &nccl_config);
  if (comm->comm) result = settle(comm->comm, result, deadline);
  if (result != ncclSuccess) return give_up(nccl_error("forming the group", result, comm->comm));
  return std::unique_ptr<collective>(new nccl_collective(sys, o, std::move(*gpu), std::move(comm)));
}

}  // namespace troupe
