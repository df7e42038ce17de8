#include "scheduler/policies/autoregressive.h"

#include "model/runtime/sampler.h"

namespace specline::scheduler {

void AutoregressivePolicy::DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) {
  // Defensive: only the newest verified token's row decides the next one.
  if (r.first_pos + r.count != static_cast<int32_t>(s.tokens.size())) return;
  const std::span<const float> row =
      out.logits.empty() ? out.logits : out.logits.first(host_.config().vocab_size);
  const int32_t token = out.greedy.empty()
                            ? Sample(row, s.sampling, s.SamplingContextFor(s.tokens), s.rng)
                            : out.greedy[0];
  host_.EmitTokenLocked(s, token, row);
}

}  // namespace specline::scheduler
