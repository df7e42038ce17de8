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
#include <chrono>
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

// One sequence's side of the pace: when its newest token came, and how the
// row deciding its next one was sent, so the gap that token closes lands in
// its kind (not thread-safe: the engine lock).
class SequencePace {
 public:
  using Clock = std::chrono::steady_clock;

  // A draft was asked for since the newest token: the sequence drafts.
  void DraftAsked() { draft_asked_ = true; }
  bool draft_asked() const { return draft_asked_; }

  // Seconds since the newest token (nullopt before the first one).
  std::optional<double> SecondsSince(Clock::time_point now) const {
    if (!last_token_at_) return std::nullopt;
    return std::chrono::duration<double>(now - *last_token_at_).count();
  }
  // The kind of the gap a token arriving now closes.
  TokenGap Gap() const {
    if (last_accepted_) return TokenGap::kAccepted;
    return drafting_ || draft_asked_ ? TokenGap::kFresh : TokenGap::kPlain;
  }
  // A gap of this kind went into the pace.
  void Counted(TokenGap gap) {
    tokens_since_plain_gap_ = gap == TokenGap::kPlain ? 0 : tokens_since_plain_gap_ + 1;
  }
  int tokens_since_plain_gap() const { return tokens_since_plain_gap_; }

  // A token came at `now`: an accepted draft (its successor's row is
  // already one stage behind) or not; `drafting`: it leaves the sequence
  // drafting (a replacement, or a draft that was not ready in time).
  void Token(Clock::time_point now, bool accepted, bool drafting) {
    last_token_at_ = now;
    last_accepted_ = accepted;
    drafting_ = drafting;
    draft_asked_ = false;
  }

 private:
  std::optional<Clock::time_point> last_token_at_;
  bool last_accepted_ = false;
  bool drafting_ = false;
  bool draft_asked_ = false;
  int tokens_since_plain_gap_ = 0;
};

}  // namespace specline::scheduler
