#include "loadtest/arrivals.h"

#include <cmath>
#include <random>
#include <stdexcept>

namespace specline::loadtest {
namespace {

// Wall time at which the cumulative expected arrivals reach `s`.
double InverseCumulative(double s, double rate, double ramp) {
  if (ramp <= 0) return s / rate;
  const double ramp_arrivals = rate * ramp / 2;
  if (s < ramp_arrivals) return std::sqrt(2 * ramp * s / rate);
  return ramp + (s - ramp_arrivals) / rate;
}

}  // namespace

std::vector<double> UnitGaps(int n, double burstiness, uint64_t seed) {
  if (burstiness <= 0) throw std::invalid_argument("burstiness must be > 0");
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gamma(burstiness, 1.0 / burstiness);
  std::vector<double> gaps(n > 0 ? n : 0);
  for (double& g : gaps) g = gamma(rng);
  return gaps;
}

std::vector<double> ArrivalTimes(const ArrivalOptions& o, int max_requests, double duration) {
  if (o.rate <= 0) throw std::invalid_argument("rate must be > 0");
  if (max_requests <= 0 && duration <= 0)
    throw std::invalid_argument("an open-loop run needs --requests or --duration");
  std::mt19937_64 rng(o.seed);
  std::gamma_distribution<double> gamma(o.burstiness, 1.0 / o.burstiness);
  std::vector<double> times;
  double s = 0;
  while (max_requests <= 0 || static_cast<int>(times.size()) < max_requests) {
    // The first request goes out at once, as in vLLM's benchmark.
    if (!times.empty()) s += gamma(rng);
    const double t = InverseCumulative(s, o.rate, o.ramp_up);
    if (duration > 0 && t >= duration) break;
    times.push_back(t);
  }
  return times;
}

}  // namespace specline::loadtest
