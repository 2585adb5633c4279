// A synthetic click log for the ctr app: examples of `fields` categorical features with
// long-tail (Zipf) popularity, labelled by a hidden logistic model (optionally with a
// factorization-machine term). Everything is derived from one seed, the same on every platform.
// Built once per process by make_click_log (held in memory), or streamed: click_stream makes
// any range of any epoch's examples from the seed when asked, holding nothing, so that a log of
// billions of examples over 2^32 ids per field costs no memory. Both are immutable and may be
// shared read-only between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <caf/expected.hpp>

namespace troupe::ctr {

// The hidden model's bias: about a quarter of the examples are clicks at the defaults.
inline constexpr double truth_bias = -1.0;

struct click_log_options {
  uint32_t fields = 8;
  uint32_t vocabulary = 100000;  // ids per field; the index of popularity rank r is r
  double zipf_exponent = 1.2;    // P(index i) proportional to (i + 1)^-zipf_exponent
  uint64_t train = 200000;
  uint64_t test = 20000;
  uint64_t seed = 1;
  double sigma = 0.5;         // hidden weights w*_id ~ N(0, sigma^2)
  uint32_t truth_fm_dim = 0;  // 0: the hidden model has no interaction term
  bool stream = false;        // train is streamed (click_stream): `train` examples an epoch
};

// Refuses options the generator cannot honour, with errc::bad_configuration and a message.
caf::error check_click_log_options(const click_log_options& opts);

// One split: example n has feature index indices[n * fields + f] in field f (its id is
// feature_id(f, index)), a 0/1 label, and, in the test split only, its true click probability.
struct click_log {
  uint32_t fields = 0;
  std::vector<uint32_t> indices;
  std::vector<uint8_t> labels;
  std::vector<float> truth;

  size_t size() const { return labels.size(); }
  bool empty() const { return labels.empty(); }

  // Writes the `fields` ids of example n into `out` (which must hold `fields` values).
  void ids_of(size_t n, std::span<uint64_t> out) const;
};

struct click_data {
  click_log train;
  click_log test;
};

// The 64-bit id of index `index` of field `field`: a bijective hash of (field, index), so ids of
// different fields never collide and spread evenly over the id space.
uint64_t feature_id(uint32_t field, uint32_t index);

// The hidden model, reproducible from (seed, id) with no table: w*_id, and component c of the
// interaction vector v*_id (drawn with a scale that gives the interaction term the same
// variance as the linear term).
double truth_weight(const click_log_options& opts, uint64_t id);
double truth_factor(const click_log_options& opts, uint64_t id, uint32_t c);

// Generates both splits (train from one stream of the seed, test from another); with
// opts.stream, the training split is left empty (click_stream makes it).
caf::expected<click_data> make_click_log(const click_log_options& opts);

class zipf_sampler;

// The streamed training split: every epoch a fresh draw of `train` examples from the seed
// (online training sees new examples, as a click log does), each made from (seed, epoch, its
// position) alone. Draws over more than 2^24 ids per field use Zipf's continuous inverse CDF
// (no table); smaller ones the same table as make_click_log.
class click_stream {
 public:
  explicit click_stream(const click_log_options& opts);
  ~click_stream();

  uint64_t size() const { return opts_.train; }
  // Examples first .. first + count - 1 of `epoch` (fewer past the end), as a log.
  click_log examples(uint64_t epoch, uint64_t first, uint64_t count) const;

 private:
  click_log_options opts_;
  std::unique_ptr<const zipf_sampler> zipf_;
};

}  // namespace troupe::ctr
