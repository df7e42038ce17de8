#include "scheduler/call_cost_curve.h"

#include <algorithm>

namespace specline::scheduler {

void CallCostCurve::Observe(int rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = buckets_[rows];
  // The first samples average; later ones follow drift (longer contexts,
  // other load) with a time constant of about 20 calls.
  const double w = b.n < 20 ? 1.0 / static_cast<double>(b.n + 1) : 0.05;
  b.mean += w * (seconds - b.mean);
  ++b.n;
}

int64_t CallCostCurve::samples(int rows) const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_[std::clamp(rows, 1, kMaxRows)].n;
}

double CallCostCurve::MeanLocked(int rows) const {
  const Bucket& b = buckets_[rows];
  return b.n >= kMinSamples ? b.mean : -1;
}

double CallCostCurve::Relative(int rows) const {
  rows = std::max(rows, 1);
  if (rows == 1) return 1.0;
  const double prior = 1.0 + kPriorExtraRow * (rows - 1);
  std::lock_guard<std::mutex> lock(mu_);
  const double one = MeanLocked(1);
  if (one <= 0) return prior;
  // The nearest measured row counts on each side.
  int lo = std::min(rows, kMaxRows), hi = lo;
  while (lo > 1 && MeanLocked(lo) < 0) --lo;
  while (hi < kMaxRows && MeanLocked(hi) < 0) ++hi;
  const double t_lo = MeanLocked(lo), t_hi = MeanLocked(hi);
  double t;
  if (rows > kMaxRows || t_hi < 0) {
    // Nothing measured above: extend from the highest measured point at
    // the mean slope measured up to it (the prior's while only one row is).
    const double slope = lo > 1 ? std::max(0.0, (t_lo - one) / (lo - 1)) : one * kPriorExtraRow;
    t = t_lo + slope * (rows - lo);
  } else if (lo == hi) {
    t = t_lo;
  } else {
    t = t_lo + (t_hi - t_lo) * static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
  }
  return std::max(1.0, t / one);
}

}  // namespace specline::scheduler
