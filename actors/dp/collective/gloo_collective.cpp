#include "actors/dp/collective/gloo_collective.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <exception>
#include <vector>

#include "troupe/error.hpp"

namespace troupe {

namespace {

// A Gloo failure as one of ours: timeouts apart from the rest (a reset or closed peer).
caf::error from_gloo(const std::exception& e, const char* doing) {
  const std::string what = e.what();
  const bool timed_out =
      what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
  return make_error(timed_out ? errc::timeout : errc::collective_failed,
                    std::string("gloo ") + doing + ": " + what);
}

// Gloo's view of our store: its keys under the generation's prefix; failures become the
// exceptions Gloo expects (caught again at our boundary, below).
class gloo_store : public gloo::rendezvous::Store {
 public:
  gloo_store(rendezvous_store& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    if (auto err = store_.set(prefix_ + key, data)) throw gloo::IoException(describe(err));
  }

  std::vector<char> get(const std::string& key) override {
    auto value = store_.get(prefix_ + key, timeout_);
    if (!value) throw gloo::IoException(describe(value.error()));
    return std::move(*value);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& key : keys) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto value = store_.get(prefix_ + key, std::max(left, std::chrono::milliseconds(1)));
      if (!value) throw gloo::IoException(describe(value.error()));
    }
  }

 private:
  rendezvous_store& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

void sum_floats(void* out, const void* a, const void* b, size_t n) {
  gloo::sum<float>(out, a, b, n);
}

class gloo_collective : public collective {
 public:
  explicit gloo_collective(std::shared_ptr<gloo::rendezvous::Context> context)
      : context_(std::move(context)) {}

  uint32_t rank() const override { return static_cast<uint32_t>(context_->rank); }
  uint32_t size() const override { return static_cast<uint32_t>(context_->size); }
  std::string backend() const override { return "gloo"; }

  caf::error allreduce(std::span<float> data, const collective_call& call) override {
    if (data.empty() || size() == 1) return {};
    return guarded("allreduce", [&] {
      gloo::AllreduceOptions o(context_);
      o.setOutput(data.data(), data.size());
      o.setReduceFunction(&sum_floats);
      o.setTag(call.tag);
      o.setTimeout(call.timeout);
      gloo::allreduce(o);
    });
  }

  // As an all-to-all followed by the sum of what arrived: each member sends (n-1)/n of its
  // values once, as a ring reduce-scatter does.
  caf::error reduce_scatter(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    if (data.empty() || size() == 1) return {};
    if (auto err = all_to_all(data, call)) return err;
    const auto mine = shard_of(data.size(), size(), rank());
    float* out = data.data() + mine.begin;
    for (size_t k = 0; k < mine.count; ++k) {
      float total = 0;
      for (uint32_t j = 0; j < size(); ++j) total += data[j * mine.count + k];
      scratch_[k] = total;
    }
    std::copy(scratch_.begin(), scratch_.begin() + mine.count, out);
    return {};
  }

  caf::error all_gather(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    if (data.empty() || size() == 1) return {};
    const auto mine = shard_of(data.size(), size(), rank());
    scratch_.assign(data.begin() + mine.begin, data.begin() + mine.begin + mine.count);
    return guarded("all_gather", [&] {
      gloo::AllgatherOptions o(context_);
      o.setInput(scratch_.data(), scratch_.size());
      o.setOutput(data.data(), data.size());
      o.setTag(call.tag);
      o.setTimeout(call.timeout);
      gloo::allgather(o);
    });
  }

  caf::error broadcast(std::span<float> data, uint32_t root, const collective_call& call) override {
    if (root >= size()) return make_error(errc::bad_configuration, "broadcast: no such root");
    if (data.empty() || size() == 1) return {};
    return guarded("broadcast", [&] {
      gloo::BroadcastOptions o(context_);
      o.setOutput(data.data(), data.size());
      o.setRoot(static_cast<int>(root));
      o.setTag(call.tag);
      o.setTimeout(call.timeout);
      gloo::broadcast(o);
    });
  }

  caf::error all_to_all(std::span<float> data, const collective_call& call) override {
    if (auto err = check_shards(data.size(), size())) return err;
    if (data.empty() || size() == 1) return {};
    scratch_.assign(data.begin(), data.end());
    return guarded("all_to_all", [&] {
      gloo::AlltoallOptions o(context_);
      o.setInput(scratch_.data(), scratch_.size());
      o.setOutput(data.data(), data.size());
      o.setTag(call.tag);
      o.setTimeout(call.timeout);
      gloo::alltoall(o);
    });
  }

  caf::error barrier(const collective_call& call) override {
    if (size() == 1) return {};
    return guarded("barrier", [&] {
      gloo::BarrierOptions o(context_);
      o.setTag(call.tag);
      o.setTimeout(call.timeout);
      gloo::barrier(o);
    });
  }

 private:
  template <class Run>
  caf::error guarded(const char* doing, Run run) {
    try {
      run();
      return {};
    } catch (const std::exception& e) {
      return from_gloo(e, doing);
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<float> scratch_;
};

}  // namespace

caf::expected<std::unique_ptr<collective>> make_gloo_collective(rendezvous_store& store,
                                                                const gloo_options& options) {
  if (options.size == 0 || options.rank >= options.size)
    return make_error(errc::bad_configuration, "gloo: rank " + std::to_string(options.rank) +
                                                   " of " + std::to_string(options.size));
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.bind_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(options.rank),
                                                               static_cast<int>(options.size));
    context->setTimeout(options.timeout);
    gloo_store adapter(store, options.prefix, options.timeout);
    context->connectFullMesh(adapter, device);
    return std::unique_ptr<collective>(new gloo_collective(std::move(context)));
  } catch (const std::exception& e) {
    return from_gloo(e, "connecting the group");
  }
}

}  // namespace troupe
