// The cost of a pipeline call by the rows it carries, measured from live
// calls: how much longer a call of m rows takes than a call of one row.
// Speculative policies weigh a draft's expected gain against it. The
// curve is a property of the deployment: on 2 CPU cores an 8-row call costs
// about 3x a 1-row call (docs/benchmarks.md, the verification curve); on a
// GPU at small batch it costs about 1x. Measuring it live, instead of
// configuring it, keeps every deployment's choice right without a flag.
#pragma once

#include <cstdint>
#include <mutex>

namespace specline::scheduler {

// The rest of the work the stages carry with a run (the other runs of its
// call and of the calls in flight beside it): what a longer run slows
// down. A draft row lengthens the call, and on a pipeline the calls behind
// it, so its price is the margin, cost(others + own + 1) / cost(others +
// own), not a call of its own; with 4 sequences running each extra row is
// worth much less. (Pricing the calls in flight as one call of all their
// rows overstates the margin a little: the rule errs towards plain decoding.)
struct CallShare {
  int other_rows = 0;       // rows the other runs carry
  double other_tokens = 0;  // tokens they are expected to decide
};

// A straight line T(m) = fixed + per_row * m through the recent calls
// (least squares, each call's weight decaying by kDecay per later call), so
// the curve follows the load of the moment (other processes, longer
// contexts) and every call informs every row count. On the CPU a call's
// time is close to linear in its rows (the weights are read once, each row
// costs its matmuls); on a GPU at small batch the slope comes out near 0.
class CallCostCurve {
 public:
  // Calls of more rows (long prefill chunks) are left out of the fit: a
  // few of them would decide the slope for the short calls drafts make.
  static constexpr int kMaxRows = 64;

  // A call of `rows` rows took `seconds`, from its send to its decisions
  // (thread-safe).
  void Observe(int rows, double seconds);

  // T(rows) / T(1) on the fitted line, never below 1 (a call never gets
  // cheaper by carrying more). Until the recent calls differ enough in
  // rows to give a slope, each extra row costs kPriorExtraRow of a call.
  double Relative(int rows) const;

  // Calls observed (weight not decayed), for tests and logs.
  int64_t calls() const;

  // Before any measurement: each extra row costs this share of a one-row
  // call. 0.25 is between a GPU (about 0) and 2 CPU cores (about 0.3), so a
  // new deployment drafts where acceptance is high and measures the rest.
  static constexpr double kPriorExtraRow = 0.25;
  // The fit needs this much weight (about this many recent calls)...
  static constexpr double kMinWeight = 4;
  // ...and this spread of row counts (their weighted variance), so that
  // noise on calls of nearly one size does not set the slope.
  static constexpr double kMinRowVariance = 0.1;
  static constexpr double kDecay = 0.98;  // about the last 50 calls

 private:
  mutable std::mutex mu_;
  // Decayed sums of 1, m, m^2, t and m t over the observed calls.
  double w_ = 0, m_ = 0, mm_ = 0, t_ = 0, mt_ = 0;
  int64_t calls_ = 0;
};

}  // namespace specline::scheduler
