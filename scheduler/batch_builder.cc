#include "scheduler/batch_builder.h"

#include <algorithm>

namespace specline::scheduler {

namespace {

// `tokens` token rows from the sequence's cached length (the last `teacher`
// of them yield logits), then as many auxiliary rows as the budget and the
// sequence's limit allow.
SlotRun PtpCall(const std::shared_ptr<Sequence>& s, int32_t tokens, int32_t teacher,
                int32_t budget) {
  SlotRun r{s, s->cached, tokens, true, s->epoch};
  r.ptp_call = true;
  r.teacher = teacher;
  r.aux = std::clamp<int32_t>(std::min(s->ptp.n_aux, budget - tokens), 0,
                              s->limit - (s->cached + tokens));
  r.count += r.aux;
  return r;
}

}  // namespace

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
    if (s->ptp.n_aux > 0) {
      const int32_t teacher = s->pending() + static_cast<int32_t>(s->ptp.proposals.size());
      if (teacher > budget) continue;
      runs.push_back(PtpCall(s, teacher, teacher, budget));
      budget -= runs.back().count;
      continue;
    }
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
    if (s->ptp.n_aux > 0 && n == s->pending()) {
      // The prompt's last chunk carries the first PTP call's auxiliary rows.
      runs.push_back(PtpCall(s, n, 1, budget));
    } else {
      runs.push_back({s, s->cached, n, n == s->pending(), s->epoch});
    }
    budget -= runs.back().count;
  }
  return runs;
}

}  // namespace specline::scheduler
