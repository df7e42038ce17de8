#include "scheduler/policies/draft_length.h"

#include <algorithm>

namespace specline::scheduler {
namespace {

size_t Index(DraftSource s) { return static_cast<size_t>(s); }

}  // namespace

double DraftLengthRule::Acceptance(DraftSource source, int position) const {
  return a_[Index(source)][std::clamp(position, 1, kMaxPositions) - 1];
}

void DraftLengthRule::Record(DraftSource source, int drafted, int accepted) {
  auto& a = a_[Index(source)];
  const int last = std::min({drafted, accepted + 1, kMaxPositions});
  for (int j = 1; j <= last; ++j) {
    const double seen = j <= accepted ? 1.0 : 0.0;
    a[j - 1] += kRate * (seen - a[j - 1]);
  }
}

int DraftLengthRule::Choose(DraftSource source, int available,
                            const std::function<double(int)>& cost,
                            const CallShare& share) const {
  const int base_rows = std::max(0, share.other_rows) + 1;
  const double others = std::max(0.0, share.other_tokens);
  double expected = 1.0, reach = 1.0, best_rate = (others + 1.0) / cost(base_rows);
  int best = 0;
  for (int k = 1; k <= std::min(available, kMaxPositions); ++k) {
    reach *= Acceptance(source, k);
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
