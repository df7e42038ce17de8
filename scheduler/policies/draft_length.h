// How many drafts a call carries: the count that maximises the expected
// tokens per unit of time. With a_j the chance that draft j is accepted
// when drafts 1..j-1 were, a run of k drafts decides
// E(k) = 1 + a_1 + a_1 a_2 + ... + a_1...a_k tokens. It shares its call with
// other runs (CallShare: R rows expected to decide B tokens), and its
// drafts lengthen the whole call, so the rule maximises the call's rate
//
//   rate(k) = (B + E(k)) / cost(R + 1 + k),
//
// (cost relative to a one-row call, CallCostCurve), and drafts nothing
// unless some k beats rate(0) = (B + 1) / cost(R + 1), plain decoding, by
// kMinGain. Alone in its call (R = B = 0) that is E(k) / cost(k + 1)
// against 1. On a deployment where extra rows are dear (2 CPU cores) only
// well-predicted drafts go out, and fewer the more sequences share a call;
// where rows are nearly free (a GPU) long drafts do.
//
// The a_j are learnt per kind of draft: its source (the request's own text,
// recent requests, Token Recycling) and, for a suffix source, the length of
// the match it continues. A continuation of a 12-token match is right far
// more often than one of a 2-token match; pooled, the short matches' rate
// would either hold back the long ones or send the short ones at a loss.
// Until a kind has kClassSamples verifications of its own, its source's
// pooled estimate stands in for it (a new server learns a source in a few
// drafts, each of its match classes only in many). A position never judged
// often enough takes the estimate of the one before it: the drafts beyond
// what the rule has sent so far would otherwise stay at the prior forever,
// and a copy that has held for 3 drafts does not fall to even odds at the 4th.
#pragma once

#include <array>
#include <functional>

#include "model/drafters/training_free_drafter.h"
#include "scheduler/call_cost_curve.h"

namespace specline::scheduler {

// A draft's kind: where it came from and how long a match it continues.
struct DraftKind {
  DraftSource source = DraftSource::kNone;
  int match = 0;
};

class DraftLengthRule {
 public:
  static constexpr int kMaxPositions = 16;
  // A draft must promise this much more than plain decoding's rate: the
  // estimates are noisy, and a draft that only breaks even costs the
  // scheduler's work for nothing.
  static constexpr double kMinGain = 0.02;

  // Drafts worth sending of `kind`, at most `available`, in a call shared
  // with `share`. `cost(m)` is the relative cost of an m-row call.
  // `checked`: the first drafts only confirm a token the call decides
  // anyway and yield none of their own (PTP's first auxiliary row);
  // `live`: the chance the drafts are verified at all (PTP's auxiliary rows
  // count only if every proposal the call verifies is accepted).
  int Choose(DraftKind kind, int available, const std::function<double(int)>& cost,
             const CallShare& share = {}, int checked = 0, double live = 1.0) const;

  // A verification of `drafted` drafts of `kind` accepted the first
  // `accepted`: draft j was accepted for j <= accepted, and rejected at
  // accepted + 1 (the drafts after it say nothing).
  void Record(DraftKind kind, int drafted, int accepted);

  double Acceptance(DraftKind kind, int position) const;  // a_position, position >= 1

  // Match lengths that share an estimate: 0-2, 3, 4-5, 6-9, 10-15, 16 and up.
  static int MatchClass(int match);
  static constexpr int kMatchClasses = 6;

 private:
  // Until measured, a draft is as likely right as wrong (the rule then
  // drafts where the curve is cheap and measures).
  static constexpr double kPrior = 0.5;
  static constexpr double kRate = 0.05;  // EMA weight of one verification
  static constexpr int kSources = 4;
  static constexpr int kClassSamples = 8;

  static constexpr int kPositionSamples = 4;

  // a_j by position, and how many verifications judged each position.
  struct Estimates {
    std::array<double, kMaxPositions> a;
    std::array<int, kMaxPositions> judged{};
    Estimates() { a.fill(kPrior); }
    void Record(int drafted, int accepted);
  };
  static size_t SourceIndex(DraftKind kind);
  static size_t ClassIndex(DraftKind kind);
  // The class's estimates once it has enough samples, else its source's.
  const Estimates& EstimatesOf(DraftKind kind) const;

  std::array<Estimates, kSources> pooled_{};
  std::array<Estimates, kSources * kMatchClasses> by_class_{};
  std::array<int, kSources * kMatchClasses> class_samples_{};
};

}  // namespace specline::scheduler
