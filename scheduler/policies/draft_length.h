// How many drafts a call carries: the count that maximises the expected
// tokens per unit of time. With a_j the chance that draft j is accepted
// when drafts 1..j-1 were, a run of k drafts decides
// E(k) = 1 + a_1 + a_1 a_2 + ... + a_1...a_k tokens. It shares its call with
// other runs (CallShare: R rows expected to decide B tokens), and its
// drafts lengthen the whole call, so the rule maximises the call's rate
//
//   rate(k) = (B + E(k)) / cost(R + 1 + k),
//
// (cost relative to a one-row call, CallCostCurve), and drafts nothing when
// no k beats rate(0) = (B + 1) / cost(R + 1), plain decoding. Alone in its
// call (R = B = 0) that is E(k) / cost(k + 1) against 1. On a deployment
// where extra rows are dear (2 CPU cores) only well-predicted drafts go
// out, and fewer the more sequences share a call; where rows are nearly
// free (a GPU) long drafts do. The a_j are learnt per draft source (the
// request's own text, recent requests, Token Recycling), since a suffix
// match and a one-token guess are right at very different rates.
#pragma once

#include <array>
#include <functional>

#include "model/drafters/training_free_drafter.h"
#include "scheduler/call_cost_curve.h"

namespace specline::scheduler {

class DraftLengthRule {
 public:
  static constexpr int kMaxPositions = 16;

  // Drafts worth sending from `source`, at most `available`, in a call
  // shared with `share`. `cost(m)` is the relative cost of an m-row call.
  int Choose(DraftSource source, int available, const std::function<double(int)>& cost,
             const CallShare& share = {}) const;

  // A verification of `drafted` drafts from `source` accepted the first
  // `accepted`: draft j was accepted for j <= accepted, and rejected at
  // accepted + 1 (the drafts after it say nothing).
  void Record(DraftSource source, int drafted, int accepted);

  double Acceptance(DraftSource source, int position) const;  // a_position, position >= 1

 private:
  // Until measured, a draft is as likely right as wrong (the rule then
  // drafts where the curve is cheap and measures).
  static constexpr double kPrior = 0.5;
  static constexpr double kRate = 0.05;  // EMA weight of one verification

  std::array<std::array<double, kMaxPositions>, 4> a_ = [] {
    std::array<std::array<double, kMaxPositions>, 4> init{};
    for (auto& per_source : init) per_source.fill(kPrior);
    return init;
  }();
};

}  // namespace specline::scheduler
