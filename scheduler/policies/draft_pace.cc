#include "scheduler/policies/draft_pace.h"

#include <algorithm>
#include <limits>

namespace specline::scheduler {

const char* TokenOriginName(TokenOrigin o) {
  switch (o) {
    case TokenOrigin::kPlain: return "plain";
    case TokenOrigin::kAccepted: return "accepted";
    case TokenOrigin::kReplacement: return "replacement";
  }
  return "?";
}

void DraftPace::Observe(TokenOrigin previous, double seconds) {
  if (!(seconds >= 0)) return;
  RunningMean& m = means_[Index(previous)];
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
  const double plain = Mean(TokenOrigin::kPlain) / (1 + kMinGain);
  const double accepted = Mean(TokenOrigin::kAccepted);
  const double replacement = Mean(TokenOrigin::kReplacement);
  // Time per token while drafting is linear in the acceptance a, from
  // `replacement` at a = 0 to `accepted` at a = 1.
  if (replacement <= plain) return 0.0;  // pays even when every draft fails
  if (accepted >= replacement) return std::numeric_limits<double>::infinity();
  return (replacement - plain) / (replacement - accepted);
}

}  // namespace specline::scheduler
