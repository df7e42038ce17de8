#include "scheduler/batch_builder.h"

#include <algorithm>

#include "scheduler/decoding_policy.h"

namespace specline::scheduler {

std::vector<SlotRun> PlanBatch(const std::vector<std::shared_ptr<Sequence>>& running,
                               const BatchLimits& policy) {
  std::vector<SlotRun> runs;
  int32_t budget = std::max(policy.max_batch_tokens, 1);
  auto take = [&](SlotRun r) {
    if (r.count <= 0) return;
    budget -= r.count;
    runs.push_back(std::move(r));
  };
  for (const auto& s : running) {
    if (budget == 0) break;
    if (s->finished() || s->pending() <= 0 || s->state != SeqState::kDecode) continue;
    take(s->policy->PlanDecode(s, budget));
  }
  for (const auto& s : running) {
    if (budget == 0) break;
    if (s->finished() || s->pending() <= 0 || s->state != SeqState::kPrefill) continue;
    take(s->policy->PlanPrefill(s, std::max(policy.prefill_chunk, 1), budget));
  }
  return runs;
}

}  // namespace specline::scheduler
