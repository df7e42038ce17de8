// Plain decoding: one token per pass through the pipeline. Every other
// policy must produce what this one does (greedy, token for token; sampled,
// in distribution).
#pragma once

#include "scheduler/decoding_policy.h"

namespace specline::scheduler {

class AutoregressivePolicy : public DecodingPolicy {
 public:
  using DecodingPolicy::DecodingPolicy;
  v1::DecodingPolicy mode() const override { return v1::DECODING_POLICY_AUTOREGRESSIVE; }
  bool KeepsGrammar() const override { return true; }
  void DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) override;
};

}  // namespace specline::scheduler
