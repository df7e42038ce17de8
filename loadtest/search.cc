#include "loadtest/search.h"

namespace specline::loadtest {

SearchResult FindMaxRate(const std::function<double(double)>& attainment, double start_rate,
                         double target, int max_doublings, int bisections) {
  SearchResult out;
  auto passes = [&](double rate) {
    const double a = attainment(rate);
    out.rates.push_back(rate);
    out.attainments.push_back(a);
    return a >= target;
  };
  double lo = 0, hi = 0;  // lo passed (0 = none yet), hi failed (0 = none yet)
  double rate = start_rate;
  for (int i = 0; i <= max_doublings; ++i, rate *= 2) {
    if (!passes(rate)) {
      hi = rate;
      break;
    }
    lo = rate;
  }
  if (hi == 0) {  // never failed: the highest rate tried
    out.max_rate = lo;
    return out;
  }
  // lo == 0 when the start rate failed: the bisection then works towards 0.
  for (int i = 0; i < bisections; ++i) {
    const double mid = (lo + hi) / 2;
    if (passes(mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  out.max_rate = lo;
  return out;
}

}  // namespace specline::loadtest
