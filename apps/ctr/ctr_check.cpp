// Checks the ctr task in one process. First its sparse gradient against central finite
// differences of an independent double-precision loss (pairwise FM sum, not the identity), with
// and without the FM term; then it trains on the default click log with a small lazy optimizer
// over an in-memory row map and prints test log loss, test AUC and truth AUC per epoch.
// Usage: ctr_check [optimizer=adam|sgd] [lr=X] [epochs=N] [fm_dim=K] [truth_fm_dim=K]
//                  [sigma=X] [zipf=X] [vocabulary=N] [train=N] [seed=N]
// Exit code 0 when the gradients agree and the final test AUC is within 0.07 of the truth AUC
// (at the default log about 8% of the test split's features are ids training never saw, so no
// model gets within ~0.04; see max_auc_gap).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "apps/ctr/click_log.hpp"
#include "apps/ctr/ctr_task.hpp"
#include "troupe/error.hpp"
#include "troupe/random.hpp"

using namespace troupe::ctr;
using troupe::splitmix64;

namespace {

constexpr uint32_t train_batch = 256;
// Calibrated for the default click log (no hidden FM term): even a model that knew w* exactly
// for every id seen at least 10 times in training would be 0.04 below the truth AUC.
constexpr double max_auc_gap = 0.07;

// Uniform in [-1, 1) from a hash, the same on every platform.
double symmetric_unit(uint64_t h) {
  return static_cast<double>(splitmix64(h) >> 11) * 0x1p-52 - 1.0;
}

template <class T>
T or_die(caf::expected<T> value) {
  if (!value) {
    std::fprintf(stderr, "%s\n", troupe::describe(value.error()).c_str());
    std::exit(2);
  }
  return std::move(*value);
}

// ---- gradient check ------------------------------------------------------------------------

// Mean log loss of every example of `log` in double, with the rows of `rows.ids` holding the
// values `w` and `v` (k per row) and the FM term summed pair by pair.
double reference_loss(const click_log& log, const troupe::sparse_rows_view& rows, double bias,
                      const std::vector<double>& w, const std::vector<double>& v, uint32_t k) {
  std::map<uint64_t, size_t> w_row, v_row;
  for (size_t i = 0; i < rows.ids[0].size(); ++i) w_row[rows.ids[0][i]] = i;
  for (size_t i = 0; k && i < rows.ids[1].size(); ++i) v_row[rows.ids[1][i]] = i;
  std::vector<uint64_t> ids(log.fields);
  double total = 0;
  for (size_t n = 0; n < log.size(); ++n) {
    log.ids_of(n, ids);
    double y = bias;
    for (uint64_t id : ids) y += w[w_row.at(id)];
    for (size_t i = 0; k && i < ids.size(); ++i)
      for (size_t j = i + 1; j < ids.size(); ++j)
        for (uint32_t c = 0; c < k; ++c)
          y += v[v_row.at(ids[i]) * k + c] * v[v_row.at(ids[j]) * k + c];
    const double p = 1.0 / (1.0 + std::exp(-y));
    total -= std::log(log.labels[n] ? p : 1.0 - p);
  }
  return total / static_cast<double>(log.size());
}

struct fd_probe {
  std::vector<double>* values;  // the double copy to perturb (bias, w or v)
  size_t index;
  float analytic;
  const char* what;
};

// Compares each probe's analytic gradient with (L(x + eps) - L(x - eps)) / (2 eps).
bool check_probes(std::vector<fd_probe> probes, const std::function<double()>& loss) {
  constexpr double eps = 1e-4, abs_tol = 1e-6, rel_tol = 1e-3;
  bool ok = true;
  double worst = 0;
  for (const fd_probe& p : probes) {
    double& x = (*p.values)[p.index];
    const double saved = x;
    x = saved + eps;
    const double up = loss();
    x = saved - eps;
    const double down = loss();
    x = saved;
    const double numeric = (up - down) / (2 * eps);
    const double err = std::abs(numeric - p.analytic);
    worst = std::max(worst, err / (abs_tol + std::abs(numeric)));
    if (err > abs_tol + rel_tol * std::abs(numeric)) {
      std::printf("  MISMATCH %s[%zu]: analytic %.8f numeric %.8f\n", p.what, p.index, p.analytic,
                  numeric);
      ok = false;
    }
  }
  std::printf("  %zu probes, worst |analytic - numeric| / (1e-6 + |numeric|) = %.2e\n",
              probes.size(), worst);
  return ok;
}

// One batch holding the whole (tiny) training split, random row values, and every row of w,
// every component of v and the bias probed.
bool gradient_check(uint32_t fm_dim) {
  ctr_options opts;
  opts.fields = 5;
  opts.vocabulary = 12;
  opts.train = 24;
  opts.test = 8;
  opts.fm_dim = fm_dim;
  opts.seed = 7;
  opts.truth_fm_dim = 2;
  std::printf("gradient check, fm_dim %u:\n", fm_dim);
  auto task = or_die(make_ctr_task(opts));
  auto replica = or_die(task->make_replica(static_cast<uint32_t>(opts.train), 3));
  const click_log log = or_die(make_click_log(click_log_options_of(opts))).train;

  troupe::sparse_rows_view rows;
  rows.ids = replica->rows_of(0, 0);
  const auto tables = task->sparse_tables();
  std::vector<std::vector<double>> exact(tables.size());  // the row values, in double
  for (size_t t = 0; t < tables.size(); ++t) {
    const size_t count = rows.ids[t].size() * tables[t].row_dim;
    rows.values.emplace_back(count);
    rows.grads.emplace_back(count, 0.0f);
    for (size_t i = 0; i < count; ++i) {
      rows.values[t][i] = static_cast<float>(0.5 * symmetric_unit(t * 1000003 + i));
      exact[t].push_back(rows.values[t][i]);
    }
  }
  std::vector<float> params{0.3f}, grad{0.0f};
  const float loss = *replica->gradient(params, rows, 0, 0, grad);

  std::vector<double> bias{params[0]};
  std::vector<double> no_v;
  std::vector<double>& v = fm_dim ? exact[1] : no_v;
  auto reference = [&] { return reference_loss(log, rows, bias[0], exact[0], v, fm_dim); };
  const double expected = reference();
  const bool loss_ok = std::abs(loss - expected) < 1e-5;
  std::printf("  loss %.7f, reference %.7f%s\n", loss, expected, loss_ok ? "" : "  MISMATCH");

  std::vector<fd_probe> probes{{&bias, 0, grad[0], "bias"}};
  for (size_t i = 0; i < exact[0].size(); ++i)
    probes.push_back({&exact[0], i, rows.grads[0][i], "w"});
  for (size_t i = 0; i < v.size(); ++i) probes.push_back({&v, i, rows.grads[1][i], "v"});
  return check_probes(std::move(probes), reference) && loss_ok;
}

// ---- training ------------------------------------------------------------------------------

struct optimizer_config {
  bool adam = true;
  double lr = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// One table's rows, created on first read with values uniform in +-init_scale drawn from
// (table, id), each with its own Adam moments and step count (lazy Adam; SGD ignores them).
struct row_store {
  uint32_t dim = 1;
  float init_scale = 0;
  uint64_t salt = 0;
  std::unordered_map<uint64_t, uint32_t> slot_of;
  std::vector<float> values, m, v;
  std::vector<uint32_t> steps;

  uint32_t slot(uint64_t id) {
    auto [it, fresh] = slot_of.try_emplace(id, static_cast<uint32_t>(steps.size()));
    if (fresh) {
      for (uint32_t c = 0; c < dim; ++c)
        values.push_back(init_scale * static_cast<float>(symmetric_unit(id ^ salt ^ c)));
      m.resize(values.size());
      v.resize(values.size());
      steps.push_back(0);
    }
    return it->second;
  }

  void gather(const std::vector<uint64_t>& ids, std::vector<float>& out) {
    out.resize(ids.size() * dim);
    for (size_t i = 0; i < ids.size(); ++i) {
      const size_t at = size_t{slot(ids[i])} * dim;
      std::copy_n(values.begin() + at, dim, out.begin() + i * dim);
    }
  }

  void apply(const std::vector<uint64_t>& ids, const std::vector<float>& grads,
             const optimizer_config& o) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t s = slot(ids[i]);
      const uint32_t t = ++steps[s];
      for (uint32_t c = 0; c < dim; ++c) step(size_t{s} * dim + c, grads[i * dim + c], t, o);
    }
  }

  void step(size_t at, double g, uint32_t t, const optimizer_config& o) {
    if (!o.adam) {
      values[at] -= static_cast<float>(o.lr * g);
      return;
    }
    m[at] = static_cast<float>(o.beta1 * m[at] + (1 - o.beta1) * g);
    v[at] = static_cast<float>(o.beta2 * v[at] + (1 - o.beta2) * g * g);
    const double m_hat = m[at] / (1 - std::pow(o.beta1, t));
    const double v_hat = v[at] / (1 - std::pow(o.beta2, t));
    values[at] -= static_cast<float>(o.lr * m_hat / (std::sqrt(v_hat) + o.eps));
  }
};

troupe::sparse_rows_view gather_all(std::vector<row_store>& stores,
                                    std::vector<std::vector<uint64_t>> ids) {
  troupe::sparse_rows_view rows;
  rows.ids = std::move(ids);
  rows.values.resize(stores.size());
  rows.grads.resize(stores.size());
  for (size_t t = 0; t < stores.size(); ++t) {
    stores[t].gather(rows.ids[t], rows.values[t]);
    rows.grads[t].assign(rows.values[t].size(), 0.0f);
  }
  return rows;
}

double figure(const std::vector<std::pair<std::string, double>>& figures, const std::string& name) {
  for (const auto& [key, value] : figures)
    if (key == name) return value;
  return std::nan("");
}

// Trains `epochs` epochs and returns truth AUC - test AUC after the last.
double train(const ctr_options& opts, const optimizer_config& o, uint32_t epochs) {
  auto start = std::chrono::steady_clock::now();
  auto task = or_die(make_ctr_task(opts));
  std::chrono::duration<double> built = std::chrono::steady_clock::now() - start;
  std::printf("click log: %llu train, %llu test examples, %u fields, built in %.2f s\n",
              static_cast<unsigned long long>(opts.train),
              static_cast<unsigned long long>(opts.test), opts.fields, built.count());

  // Step 1: one row store per table, a dense bias with its own optimizer state.
  std::vector<row_store> stores;
  for (const auto& spec : task->sparse_tables())
    stores.push_back({spec.row_dim, spec.init_scale, splitmix64(stores.size() + 1)});
  row_store bias{1, 0, 0};
  std::vector<float> params{0.0f}, grad{0.0f};
  task->initialize(1, params);
  bias.values[bias.slot(0)] = params[0];

  // Step 2: one replica runs every batch; the optimizer updates the rows each batch read.
  auto replica = or_die(task->make_replica(train_batch, 11));
  const uint64_t steps = task->batches_per_epoch(train_batch);
  double gap = 1;
  for (uint32_t e = 0; e < epochs; ++e) {
    auto epoch_start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (uint64_t b = 0; b < steps; ++b) {
      auto rows = gather_all(stores, replica->rows_of(e, b));
      loss_sum += *replica->gradient(params, rows, e, b, grad);
      for (size_t t = 0; t < stores.size(); ++t) stores[t].apply(rows.ids[t], rows.grads[t], o);
      bias.apply({0}, grad, o);
      params[0] = bias.values[0];
    }
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - epoch_start;

    // Step 3: evaluation reads the test split's rows.
    const auto rows = gather_all(stores, task->evaluation_rows());
    const auto eval = task->evaluate(params, rows);
    const auto figures = task->report_figures(params, rows);
    gap = figure(figures, "truth_auc") - figure(figures, "test_auc");
    std::printf(
        "epoch %u: %llu steps in %.2f s, train loss %.4f | test logloss %.4f "
        "(truth %.4f), accuracy %.4f, AUC %.4f (truth %.4f), %zu rows\n",
        e + 1, static_cast<unsigned long long>(steps), took.count(),
        loss_sum / static_cast<double>(steps), figure(figures, "test_logloss"),
        figure(figures, "truth_logloss"), eval.accuracy, figure(figures, "test_auc"),
        figure(figures, "truth_auc"), stores[0].steps.size());
  }
  return gap;
}

// Parses all of `text` as a number into `out`; false when it is not one.
bool parse(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0';
}

template <class T>
bool parse(const std::string& text, T& out) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  out = static_cast<T>(value);
  return !text.empty() && text[0] != '-' && *end == '\0' && value == out;
}

// Reads "name=value" arguments over the defaults; false on one it does not know or cannot read.
bool parse_arguments(int argc, char** argv, ctr_options& opts, optimizer_config& o,
                     uint32_t& epochs) {
  bool lr_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq), value = eq == arg.npos ? "" : arg.substr(eq + 1);
    bool ok = true;
    if (name == "optimizer" && (value == "adam" || value == "sgd"))
      o.adam = value == "adam";
    else if (name == "lr")
      ok = lr_given = parse(value, o.lr);
    else if (name == "epochs")
      ok = parse(value, epochs);
    else if (name == "fm_dim")
      ok = parse(value, opts.fm_dim);
    else if (name == "truth_fm_dim")
      ok = parse(value, opts.truth_fm_dim);
    else if (name == "sigma")
      ok = parse(value, opts.sigma);
    else if (name == "zipf")
      ok = parse(value, opts.zipf_exponent);
    else if (name == "vocabulary")
      ok = parse(value, opts.vocabulary);
    else if (name == "train")
      ok = parse(value, opts.train);
    else if (name == "seed")
      ok = parse(value, opts.seed);
    else
      ok = false;
    if (!ok) return false;
  }
  if (!lr_given) o.lr = o.adam ? 0.01 : 5.0;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ctr_options opts;
  optimizer_config o;
  uint32_t epochs = 2;
  if (!parse_arguments(argc, argv, opts, o, epochs)) {
    std::fprintf(stderr,
                 "usage: ctr_check [optimizer=adam|sgd] [lr=X] [epochs=N] [fm_dim=K] "
                 "[truth_fm_dim=K] [sigma=X] [zipf=X] [vocabulary=N] [train=N] [seed=N]\n");
    return 2;
  }
  bool ok = gradient_check(0);
  ok = gradient_check(3) && ok;
  std::printf("training: %s lr %g, batch %u, fm_dim %u, truth_fm_dim %u, sigma %g\n",
              o.adam ? "adam" : "sgd", o.lr, train_batch, opts.fm_dim, opts.truth_fm_dim,
              opts.sigma);
  const double gap = train(opts, o, epochs);
  std::printf("truth AUC - test AUC = %.4f (limit %.2f); gradients %s\n", gap, max_auc_gap,
              ok ? "ok" : "WRONG");
  return ok && gap < max_auc_gap ? 0 : 1;
}
