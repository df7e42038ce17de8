#include "scheduler/policies/autoregressive.h"

#include "model/runtime/sampler.h"

namespace specline::scheduler {

void AutoregressivePolicy::DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) {
  // Defensive: only the newest verified token's row decides the next one.
  if (r.first_pos + r.count != static_cast<int32_t>(s.tokens.size())) return;
  host_.EmitTokenLocked(s, out.greedy.empty() ? Sample(out.logits, s.sampling, s.tokens, s.rng)
                                              : out.greedy[0]);
}

}  // namespace specline::scheduler
