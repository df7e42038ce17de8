#include "scheduler/batch_builder.h"

#include <algorithm>

namespace specline::scheduler {

std::vector<SlotRun> PlanBatch(const std::vector<std::shared_ptr<Sequence>>& running,
                               const BatchPolicy& policy) {
  std::vector<SlotRun> runs;
  int budget = std::max(policy.max_batch_tokens, 1);
  auto schedulable = [](const Sequence& s) {
    return !s.finished() && s.pending() > 0;
  };
  for (const auto& s : running) {
    if (budget == 0) break;
    if (!schedulable(*s) || s->state != SeqState::kDecode) continue;
    // AR decode has exactly one pending token; sending all of them keeps the
    // rule right if a policy ever leaves more.
    const int32_t n = std::min<int32_t>(s->pending(), budget);
    runs.push_back({s, s->cached, n, n == s->pending(), s->epoch});
    budget -= n;
  }
  for (const auto& s : running) {
    if (budget == 0) break;
    if (!schedulable(*s) || s->state != SeqState::kPrefill) continue;
    const int32_t n = std::min({s->pending(), std::max(policy.prefill_chunk, 1), budget});
    runs.push_back({s, s->cached, n, n == s->pending(), s->epoch});
    budget -= n;
  }
  return runs;
}

}  // namespace specline::scheduler
