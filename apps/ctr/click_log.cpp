#include "apps/ctr/click_log.hpp"

#include "troupe/random.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "troupe/error.hpp"

namespace troupe::ctr {
namespace {

constexpr uint32_t max_fields = 256;
constexpr uint32_t max_table_vocabulary = uint32_t{1} << 24;  // zipf_sampler's table (128 MiB)
constexpr uint64_t max_streamed = uint64_t{1} << 40;           // examples an epoch, streamed
constexpr uint32_t max_truth_fm_dim = 64;
constexpr uint64_t max_slots = uint64_t{1} << 28;  // examples * fields per split (1 GiB)
constexpr double max_scale = 10.0;

// Stream tags, so train and test draw from unrelated generators of the same seed.
constexpr uint64_t train_stream = 1;
constexpr uint64_t test_stream = 2;
// Hash tags, so w*_id and v*_id,c are unrelated draws (and a streamed example's label draw is
// unrelated to its fields').
constexpr uint64_t weight_tag = 0x77;
constexpr uint64_t factor_tag = 0x76;
constexpr uint64_t label_tag = 0x6c;

uint64_t mix(uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(a) ^ b);
}

// A double in [0, 1) from the top 53 bits, the same on every platform.
double unit_double(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// N(0, 1) from the hash `h` by Box-Muller (u1 in (0, 1], so the log is finite).
double standard_normal(uint64_t h) {
  const double u1 = 1.0 - unit_double(h);
  const double u2 = unit_double(splitmix64(h));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

// Inverse-CDF sampling of Zipf(s) over 0..n-1: up to 2^24 ids from a table of the cumulative
// probabilities (one binary search per draw), beyond from the continuous distribution's inverse
// CDF (x^-s on [1, n + 1], floored): the same long tail, with no table.
class zipf_sampler {
 public:
  zipf_sampler(uint32_t n, double s) : n_(n), s_(s) {
    if (n > max_table_vocabulary) return;
    cdf_.resize(n);
    double total = 0;
    for (uint32_t i = 0; i < n; ++i) cdf_[i] = total += std::pow(static_cast<double>(i) + 1, -s);
    for (double& c : cdf_) c /= total;
  }

  // The index of the uniform draw u in [0, 1).
  uint32_t operator()(double u) const {
    const auto last = n_ - 1;
    if (!cdf_.empty()) {
      const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
      return std::min(static_cast<uint32_t>(it - cdf_.begin()), last);
    }
    const double top = static_cast<double>(n_) + 1;
    double x;
    if (std::abs(s_ - 1) < 1e-9)
      x = std::pow(top, u);
    else
      x = std::pow(1 + u * (std::pow(top, 1 - s_) - 1), 1 / (1 - s_));
    return static_cast<uint32_t>(std::clamp(x - 1, 0.0, static_cast<double>(last)));
  }
  uint32_t operator()(std::mt19937_64& gen) const { return (*this)(unit_double(gen())); }

 private:
  uint32_t n_;
  double s_;
  std::vector<double> cdf_;
};

namespace {

// b* + sum_i w*_i + sum_{i<j} <v*_i, v*_j>, the last by the identity
// 0.5 * sum_c ((sum_i v*_i,c)^2 - sum_i v*_i,c^2).
double truth_logit(const click_log_options& opts, std::span<const uint64_t> ids) {
  double logit = truth_bias;
  for (uint64_t id : ids) logit += truth_weight(opts, id);
  for (uint32_t c = 0; c < opts.truth_fm_dim; ++c) {
    double sum = 0, squares = 0;
    for (uint64_t id : ids) {
      const double v = truth_factor(opts, id, c);
      sum += v;
      squares += v * v;
    }
    logit += 0.5 * (sum * sum - squares);
  }
  return logit;
}

// `count` examples drawn from stream `stream` of the seed; keeps the true probabilities when
// `keep_truth`.
click_log generate(const click_log_options& opts, const zipf_sampler& zipf, uint64_t count,
                   uint64_t stream, bool keep_truth) {
  click_log log;
  log.fields = opts.fields;
  log.indices.resize(count * opts.fields);
  log.labels.resize(count);
  if (keep_truth) log.truth.resize(count);
  std::mt19937_64 gen(mix(opts.seed, stream));
  std::vector<uint64_t> ids(opts.fields);
  for (uint64_t n = 0; n < count; ++n) {
    uint32_t* row = log.indices.data() + n * opts.fields;
    for (uint32_t f = 0; f < opts.fields; ++f) row[f] = zipf(gen);
    log.ids_of(n, ids);
    const double p = sigmoid(truth_logit(opts, ids));
    log.labels[n] = unit_double(gen()) < p ? 1 : 0;
    if (keep_truth) log.truth[n] = static_cast<float>(p);
  }
  return log;
}

caf::error refuse(const std::string& what) {
  return make_error(errc::bad_configuration, "ctr: " + what);
}

bool in_range(double x, double lo, double hi) {
  return std::isfinite(x) && x >= lo && x <= hi;
}

}  // namespace

void click_log::ids_of(size_t n, std::span<uint64_t> out) const {
  const uint32_t* row = indices.data() + n * fields;
  for (uint32_t f = 0; f < fields; ++f) out[f] = feature_id(f, row[f]);
}

uint64_t feature_id(uint32_t field, uint32_t index) {
  return splitmix64((uint64_t{field} << 40) | index);
}

double truth_weight(const click_log_options& opts, uint64_t id) {
  return opts.sigma * standard_normal(mix(mix(opts.seed, weight_tag), id));
}

double truth_factor(const click_log_options& opts, uint64_t id, uint32_t c) {
  // Var(sum_{i<j} <v_i, v_j>) = F (F - 1) / 2 * k * s^4, which equals F sigma^2 (the linear
  // term's variance) for s^2 = sigma * sqrt(2 / ((F - 1) k)).
  const double pairs_scale = opts.fields > 1 && opts.truth_fm_dim > 0
                                 ? std::sqrt(2.0 / ((opts.fields - 1.0) * opts.truth_fm_dim))
                                 : 1.0;
  const double scale = std::sqrt(opts.sigma * pairs_scale);
  return scale * standard_normal(mix(mix(mix(opts.seed, factor_tag), id), c));
}

caf::error check_click_log_options(const click_log_options& opts) {
  if (opts.fields < 1 || opts.fields > max_fields)
    return refuse("fields must be 1.." + std::to_string(max_fields) + " (got " +
                  std::to_string(opts.fields) + ")");
  if (opts.vocabulary < 1)
    return refuse("vocabulary must be at least 1 id per field");
  if (!in_range(opts.zipf_exponent, 0, max_scale))
    return refuse("zipf exponent must be a finite number in [0, 10]");
  if (!in_range(opts.sigma, 0, max_scale))
    return refuse("sigma must be a finite number in [0, 10]");
  if (opts.truth_fm_dim > max_truth_fm_dim)
    return refuse("truth_fm_dim must be at most " + std::to_string(max_truth_fm_dim));
  const uint64_t max_examples = max_slots / opts.fields;
  if ((!opts.stream && opts.train > max_examples) || opts.test > max_examples)
    return refuse("at most " + std::to_string(max_examples) + " examples per split with " +
                  std::to_string(opts.fields) + " fields held in memory (--stream: " +
                  std::to_string(max_streamed) + " training examples an epoch)");
  if (opts.stream && opts.train > max_streamed)
    return refuse("at most " + std::to_string(max_streamed) + " streamed examples an epoch");
  return {};
}

caf::expected<click_data> make_click_log(const click_log_options& opts) {
  if (auto err = check_click_log_options(opts)) return err;
  const zipf_sampler zipf(opts.vocabulary, opts.zipf_exponent);
  click_data data;
  if (!opts.stream) data.train = generate(opts, zipf, opts.train, train_stream, false);
  data.test = generate(opts, zipf, opts.test, test_stream, true);
  return data;
}

click_stream::click_stream(const click_log_options& opts)
    : opts_(opts), zipf_(std::make_unique<const zipf_sampler>(opts.vocabulary, opts.zipf_exponent)) {}

click_stream::~click_stream() = default;

click_log click_stream::examples(uint64_t epoch, uint64_t first, uint64_t count) const {
  click_log log;
  log.fields = opts_.fields;
  if (first >= opts_.train) return log;
  count = std::min(count, opts_.train - first);
  log.indices.resize(count * opts_.fields);
  log.labels.resize(count);
  const uint64_t epoch_key = mix(mix(opts_.seed, train_stream), epoch);
  std::vector<uint64_t> ids(opts_.fields);
  for (uint64_t n = 0; n < count; ++n) {
    const uint64_t key = mix(epoch_key, first + n);
    uint32_t* row = log.indices.data() + n * opts_.fields;
    for (uint32_t f = 0; f < opts_.fields; ++f) row[f] = (*zipf_)(unit_double(mix(key, f)));
    log.ids_of(n, ids);
    const double p = sigmoid(truth_logit(opts_, ids));
    log.labels[n] = unit_double(mix(key, label_tag)) < p ? 1 : 0;
  }
  return log;
}

}  // namespace troupe::ctr
