#include "scheduler/policies/draft_pace.h"

#include <algorithm>
#include <limits>

namespace specline::scheduler {

const char* TokenGapName(TokenGap g) {
  switch (g) {
    case TokenGap::kPlain: return "plain";
    case TokenGap::kAccepted: return "accepted";
    case TokenGap::kFresh: return "fresh";
  }
  return "?";
}

void DraftPace::Observe(TokenGap gap, double seconds) {
  if (!(seconds >= 0)) return;
  RunningMean& m = means_[Index(gap)];
  // A gap the OS stretched (the process descheduled on a shared machine)
  // would move the mean for the next 20 tokens: once the mean is
  // established, one observation counts for at most kMaxRatio of it.
  if (m.samples >= kMinSamples) seconds = std::min(seconds, kMaxRatio * m.value);
  // The first observations average evenly, then the weight settles at
  // kRate: an early outlier does not linger.
  ++m.samples;
  const double w = std::max(kRate, 1.0 / m.samples);
  m.value += w * (seconds - m.value);
}

std::optional<double> DraftPace::BreakEven() const {
  for (const RunningMean& m : means_) {
    if (m.samples < kMinSamples) return std::nullopt;
  }
  const double plain = Mean(TokenGap::kPlain) / (1 + kMinGain);
  const double accepted = Mean(TokenGap::kAccepted);
  const double fresh = Mean(TokenGap::kFresh);
  // Time per token while drafting is linear in the accepted share a, from
  // `fresh` at a = 0 to `accepted` at a = 1.
  if (fresh <= plain) return 0.0;  // pays even when every draft fails
  if (accepted >= fresh) return std::numeric_limits<double>::infinity();
  return (fresh - plain) / (fresh - accepted);
}

}  // namespace specline::scheduler
