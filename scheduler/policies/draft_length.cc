#include "scheduler/policies/draft_length.h"

#include <algorithm>

namespace specline::scheduler {

int DraftLengthRule::MatchClass(int match) {
  if (match <= 2) return 0;
  if (match == 3) return 1;
  if (match <= 5) return 2;
  if (match <= 9) return 3;
  if (match <= 15) return 4;
  return 5;
}

size_t DraftLengthRule::SourceIndex(DraftKind kind) {
  return static_cast<size_t>(std::clamp(static_cast<int>(kind.source), 0, kSources - 1));
}

size_t DraftLengthRule::ClassIndex(DraftKind kind) {
  return SourceIndex(kind) * kMatchClasses + static_cast<size_t>(MatchClass(kind.match));
}

const DraftLengthRule::Estimates& DraftLengthRule::EstimatesOf(DraftKind kind) const {
  const size_t c = ClassIndex(kind);
  return class_samples_[c] >= kClassSamples ? by_class_[c] : pooled_[SourceIndex(kind)];
}

double DraftLengthRule::Acceptance(DraftKind kind, int position) const {
  const Estimates& e = EstimatesOf(kind);
  int j = std::clamp(position, 1, kMaxPositions);
  while (j > 1 && e.judged[static_cast<size_t>(j - 1)] < kPositionSamples) --j;
  return e.a[static_cast<size_t>(j - 1)];
}

void DraftLengthRule::Estimates::Record(int drafted, int accepted) {
  const int last = std::min({drafted, accepted + 1, kMaxPositions});
  for (int j = 1; j <= last; ++j) {
    const auto i = static_cast<size_t>(j - 1);
    const double seen = j <= accepted ? 1.0 : 0.0;
    a[i] += kRate * (seen - a[i]);
    if (judged[i] < kPositionSamples) ++judged[i];
  }
}

void DraftLengthRule::Record(DraftKind kind, int drafted, int accepted) {
  const size_t c = ClassIndex(kind);
  pooled_[SourceIndex(kind)].Record(drafted, accepted);
  by_class_[c].Record(drafted, accepted);
  if (drafted > 0 && class_samples_[c] < kClassSamples) ++class_samples_[c];
}

int DraftLengthRule::Choose(DraftKind kind, int available,
                            const std::function<double(int)>& cost,
                            const CallShare& share, int checked, double live) const {
  const int base_rows = std::max(0, share.other_rows) + 1;
  const double others = std::max(0.0, share.other_tokens);
  double expected = 1.0, reach = std::clamp(live, 0.0, 1.0);
  double best_rate = (1.0 + kMinGain) * (others + 1.0) / cost(base_rows);
  int best = 0;
  for (int k = 1; k <= std::min(available, kMaxPositions); ++k) {
    reach *= Acceptance(kind, k);
    if (k > checked) expected += reach;
    const double rate = (others + expected) / cost(base_rows + k);
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

}  // namespace specline::scheduler
