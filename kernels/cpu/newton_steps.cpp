#include "kernels/cpu/newton_steps.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace troupe::kernels {

namespace {

double power(double x, int q) {  // x^q for a small q >= 0, without pow's cost
  double out = 1.0;
  for (int i = 0; i < q; ++i) out *= x;
  return out;
}

double image(double m, double pole, int q) {
  return m * power(1.0 - m / pole, q);
}

// max and min of m (1 - m / pole)^q over [lo, hi]: one peak, at pole / (q + 1).
std::pair<double, double> image_range(double lo, double hi, double pole, int q) {
  const double at_lo = image(lo, pole, q), at_hi = image(hi, pole, q);
  const double peak = pole / (q + 1);
  const double most = peak > lo && peak < hi ? image(peak, pole, q) : std::max(at_lo, at_hi);
  return {most, std::min(at_lo, at_hi)};
}

}  // namespace

polynomial_step choose_step(double lo, double hi, int q) {
  // The peak pole / (q + 1) stays at or above lo, so that eigenvalues below the interval (an
  // estimate) map below its image and never past 1; T stays positive to 1.25 hi.
  const double last = (q + 1) * hi, first = std::min(last, std::max(1.25 * hi, (q + 1) * lo));
  double best_pole = last, best_ratio = HUGE_VAL;
  auto consider = [&](double pole) {
    const auto [most, least] = image_range(lo, hi, pole, q);
    const double ratio = least > 0 ? most / least : HUGE_VAL;
    if (ratio < best_ratio) best_ratio = ratio, best_pole = pole;
  };
  if (!(lo > 0) || lo >= hi) {  // no lower bound, or a point: the classic step
    const double gain = std::pow(image(hi, last, q), -1.0 / q);
    const double next_lo = lo >= hi ? 1.0 : std::max(0.0, image(lo, last, q)) * std::pow(gain, q);
    return {last, gain, std::min(next_lo, 1.0)};
  }
  constexpr int samples = 256;  // log-spaced, then refined around the best
  const double width = std::pow(last / first, 1.0 / samples);
  double pole = first;
  for (int i = 0; i <= samples; ++i, pole *= width) consider(std::min(pole, last));
  const double fine = std::pow(width, 1.0 / 16);
  pole = best_pole / width;
  for (int i = -16; i <= 16; ++i, pole *= fine) consider(std::clamp(pole, first, last));
  const auto [most, least] = image_range(lo, hi, best_pole, q);
  return {best_pole, std::pow(most, -1.0 / q), least / most};
}

std::vector<polynomial_step> newton_schedule(double lo, int q, int classic, int max_steps) {
  std::vector<polynomial_step> steps;
  while (lo < 0.999 && static_cast<int>(steps.size()) < max_steps) {
    steps.push_back(choose_step(lo, 1.0, q));
    lo = steps.back().next_lo;
  }
  for (int i = 0; i < classic && static_cast<int>(steps.size()) < max_steps; ++i)
    steps.push_back(choose_step(1.0, 1.0, q));
  return steps;
}

}  // namespace troupe::kernels
