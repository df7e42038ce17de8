#include "scheduler/policies/draft_length.h"

#include <algorithm>
#include <utility>

namespace specline::scheduler {

int DraftLengthRule::MatchClass(int match) {
  if (match <= 2) return 0;
  if (match == 3) return 1;
  if (match <= 5) return 2;
  if (match <= 9) return 3;
  if (match <= 15) return 4;
  return 5;
}

const DraftLengthRule::Estimates& DraftLengthRule::EstimatesOf(DraftKind kind) const {
  const int source = std::clamp(static_cast<int>(kind.source), 0, kSources - 1);
  return a_[static_cast<size_t>(source * kMatchClasses + MatchClass(kind.match))];
}

DraftLengthRule::Estimates& DraftLengthRule::EstimatesOf(DraftKind kind) {
  return const_cast<Estimates&>(std::as_const(*this).EstimatesOf(kind));
}

double DraftLengthRule::Acceptance(DraftKind kind, int position) const {
  return EstimatesOf(kind)[std::clamp(position, 1, kMaxPositions) - 1];
}

void DraftLengthRule::Record(DraftKind kind, int drafted, int accepted) {
  Estimates& a = EstimatesOf(kind);
  const int last = std::min({drafted, accepted + 1, kMaxPositions});
  for (int j = 1; j <= last; ++j) {
    const double seen = j <= accepted ? 1.0 : 0.0;
    a[j - 1] += kRate * (seen - a[j - 1]);
  }
}

int DraftLengthRule::Choose(DraftKind kind, int available,
                            const std::function<double(int)>& cost,
                            const CallShare& share) const {
  const Estimates& a = EstimatesOf(kind);
  const int base_rows = std::max(0, share.other_rows) + 1;
  const double others = std::max(0.0, share.other_tokens);
  double expected = 1.0, reach = 1.0;
  double best_rate = (1.0 + kMinGain) * (others + 1.0) / cost(base_rows);
  int best = 0;
  for (int k = 1; k <= std::min(available, kMaxPositions); ++k) {
    reach *= a[static_cast<size_t>(k - 1)];
    expected += reach;
    const double rate = (others + expected) / cost(base_rows + k);
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

}  // namespace specline::scheduler
