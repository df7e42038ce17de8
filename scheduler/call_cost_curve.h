// The cost of a pipeline call by the rows it carries, measured from live
// calls: how much longer a call of m rows takes than a call of one row.
// Speculative policies weigh a draft's expected gain against it. The
// curve is a property of the deployment: on 2 CPU cores an 8-row call costs
// about 3x a 1-row call (docs/benchmarks.md, the verification curve); on a
// GPU at small batch it costs about 1x. Measuring it live, instead of
// configuring it, keeps every deployment's choice right without a flag.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace specline::scheduler {

// The rest of the call a run rode in: what a longer run would slow down.
// A draft row makes the whole call longer, so its price is the call's
// margin, cost(others + own + 1) / cost(others + own), not a call of its
// own; with 4 sequences in a batch each extra row is worth much less.
struct CallShare {
  int other_rows = 0;       // rows the call's other runs carried
  double other_tokens = 0;  // tokens those runs are expected to decide
};

class CallCostCurve {
 public:
  // Calls of more rows (long prefill chunks) are not measured; a batch of
  // decoding sequences with their drafts fits (8 sequences of 1 + 7 rows).
  static constexpr int kMaxRows = 64;

  // A call of `rows` rows took `seconds`, from its send to its logits
  // (thread-safe).
  void Observe(int rows, double seconds);

  // T(rows) / T(1): from the measured calls where both are known (at least
  // kMinSamples each), interpolated between measured row counts, beyond
  // the longest measured call extended at the measured mean slope, else
  // the prior. Never below 1 (a call never gets cheaper by carrying more).
  double Relative(int rows) const;

  int64_t samples(int rows) const;

  // Before any measurement: each extra row costs this share of a one-row
  // call. 0.25 is between a GPU (about 0) and 2 CPU cores (about 0.3), so a
  // new deployment drafts where acceptance is high and measures the rest.
  static constexpr double kPriorExtraRow = 0.25;
  static constexpr int kMinSamples = 4;

 private:
  struct Bucket {
    double mean = 0;  // seconds, an exponential moving average
    int64_t n = 0;
  };
  // A bucket's mean, under mu_; < 0 when it has too few samples.
  double MeanLocked(int rows) const;

  mutable std::mutex mu_;
  std::array<Bucket, kMaxRows + 1> buckets_{};  // [rows], 1..kMaxRows
};

}  // namespace specline::scheduler
