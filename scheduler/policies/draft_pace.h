// When pipeline speculation (SPD, PPSD) pays on this deployment, measured
// from live sequences rather than assumed.
//
// Under pipeline speculation a token's row is sent before the token is
// known when it was a draft, so the gap to the next token depends on how
// the token before it was decided:
//
//   after an accepted draft: its row was already one stage behind, so the
//     next token comes one stage time later (t_accepted);
//   after a replacement (a rejected draft): the row starts down the
//     pipeline now, behind the voided drafts still in the stages
//     (t_replacement);
//   after a plain token (no draft in flight): the row crosses the pipeline
//     alone (t_plain).
//
// A sequence that drafts at acceptance a spends a t_accepted + (1 - a)
// t_replacement per token against t_plain plainly, so drafting pays above
//
//   a* = (t_replacement - t_plain / (1 + gain)) / (t_replacement - t_accepted).
//
// Four stages on four GPUs give t_accepted near t_plain / 4 and a* near 0;
// two stage processes sharing 2 CPU cores with the scheduler and its
// drafter give t_accepted close to t_plain and a* near 1. Nothing here is
// configured: each gap is a running mean over the policy's sequences.
#pragma once

#include <array>
#include <optional>

namespace specline::scheduler {

enum class TokenOrigin { kPlain, kAccepted, kReplacement };
const char* TokenOriginName(TokenOrigin o);

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

  // A sequence's token came `seconds` after its previous one, which was
  // decided as `previous` (not thread-safe: the engine lock).
  void Observe(TokenOrigin previous, double seconds);

  // The acceptance above which drafting gives tokens faster than plain
  // decoding (a*, may exceed 1: drafting never pays); nullopt until every
  // gap has kMinSamples observations.
  std::optional<double> BreakEven() const;

  // The running mean gap after `origin` (0 until observed).
  double Mean(TokenOrigin origin) const { return means_[Index(origin)].value; }
  int Samples(TokenOrigin origin) const { return means_[Index(origin)].samples; }

 private:
  struct RunningMean {
    double value = 0;
    int samples = 0;
  };
  static size_t Index(TokenOrigin o) { return static_cast<size_t>(o); }
  std::array<RunningMean, 3> means_{};
};

}  // namespace specline::scheduler
