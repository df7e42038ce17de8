#include "scheduler/call_cost_curve.h"

#include <algorithm>

namespace specline::scheduler {

void CallCostCurve::Observe(int rows, double seconds) {
  if (rows < 1 || rows > kMaxRows || !(seconds > 0)) return;
  const double m = rows;
  std::lock_guard<std::mutex> lock(mu_);
  w_ = kDecay * w_ + 1;
  m_ = kDecay * m_ + m;
  mm_ = kDecay * mm_ + m * m;
  t_ = kDecay * t_ + seconds;
  mt_ = kDecay * mt_ + m * seconds;
  ++calls_;
}

int64_t CallCostCurve::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

double CallCostCurve::Relative(int rows) const {
  rows = std::max(rows, 1);
  const double prior = 1.0 + kPriorExtraRow * (rows - 1);
  std::lock_guard<std::mutex> lock(mu_);
  if (w_ < kMinWeight) return prior;
  const double mean_m = m_ / w_, mean_t = t_ / w_;
  const double var_m = mm_ / w_ - mean_m * mean_m;
  if (var_m < kMinRowVariance || !(mean_t > 0)) return prior;
  const double per_row = std::max(0.0, (mt_ / w_ - mean_m * mean_t) / var_m);
  // A line steeper than the calls themselves (noise on few sizes) would put
  // a one-row call at or below 0 s: keep T(1) at least a tenth of the mean.
  const double one = std::max(mean_t - per_row * (mean_m - 1), 0.1 * mean_t);
  return std::max(1.0, (one + per_row * (rows - 1)) / one);
}

}  // namespace specline::scheduler
