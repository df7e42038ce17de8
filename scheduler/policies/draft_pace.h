// When pipeline speculation (SPD, PPSD) pays on this deployment, measured
// from live sequences rather than assumed.
//
// Under pipeline speculation the gap between a sequence's tokens depends on
// when the row that decides the next token was sent:
//
//   kAccepted: the token was an accepted draft, so its row was already one
//     stage behind: the next token comes one stage time later;
//   kFresh: the row is sent now, while the sequence drafts (after a
//     rejected draft, behind the voided drafts still in the stages, or
//     after a draft that was asked for and not ready in time), and the
//     drafter's work shares the machine with it;
//   kPlain: the row is sent now by a sequence that is not drafting.
//
// A sequence whose tokens arrive as accepted drafts with share a spends
// a t_accepted + (1 - a) t_fresh per token while drafting, against t_plain
// plainly, so drafting pays above
//
//   a* = (t_fresh - t_plain / (1 + gain)) / (t_fresh - t_accepted).
//
// Four stages on four GPUs give t_accepted near t_plain / 4 and a* near 0;
// a drafter whose work delays the next row, or stage processes short of
// cores, give t_fresh well above t_plain and a* near or above 1. Nothing
// here is configured: each gap is a running mean over the policy's
// sequences.
#pragma once

#include <array>
#include <optional>

namespace specline::scheduler {

enum class TokenGap { kPlain, kAccepted, kFresh };
const char* TokenGapName(TokenGap g);

class DraftPace {
 public:
  // A draft must promise this much more than plain decoding's rate: the
  // means are noisy and a flush costs the scheduler's work for nothing.
  static constexpr double kMinGain = 0.02;
  // Observations each gap needs before its mean is trusted.
  static constexpr int kMinSamples = 8;
  // Weight of one observation in a mean: about the last 20 tokens, so the
  // pace follows the load of the moment.
  static constexpr double kRate = 0.05;
  // An observation counts for at most this multiple of the mean so far.
  static constexpr double kMaxRatio = 3.0;

  // A sequence's token came `seconds` after its previous one, over a gap
  // of kind `gap` (not thread-safe: the engine lock).
  void Observe(TokenGap gap, double seconds);

  // The share of tokens arriving as accepted drafts above which drafting
  // gives tokens faster than plain decoding (a*, may exceed 1: drafting
  // never pays); nullopt until every gap has kMinSamples observations.
  std::optional<double> BreakEven() const;

  // The running mean gap of a kind (0 until observed).
  double Mean(TokenGap gap) const { return means_[Index(gap)].value; }
  int Samples(TokenGap gap) const { return means_[Index(gap)].samples; }

 private:
  struct RunningMean {
    double value = 0;
    int samples = 0;
  };
  static size_t Index(TokenGap g) { return static_cast<size_t>(g); }
  std::array<RunningMean, 3> means_{};
};

}  // namespace specline::scheduler
