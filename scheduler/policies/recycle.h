// Training-free draft-then-verify (docs/drafters.md), as vLLM's n-gram
// speculation does it: the sequence's next call carries the newest token
// and k drafts as k + 1 rows of one micro-batch; their logits verify the
// drafts in order (greedy equality, or rejection sampling against the
// point-mass draft, so the output is distributed as plain decoding), then
// the accepted drafts and one more token are emitted. The drafts come from
// prompt lookup, else Token Recycling, whose matrix learns from every
// verified row. One call in flight per sequence: the stages overwrite the
// rejected rows' KV when the next call writes them (implicit rollback, as
// for PTP). k adapts to the sequence's acceptance (DraftGate::kAuto), since
// on CPU each extra row costs a share of a step (docs/benchmarks.md, the
// verification curve).
#pragma once

#include <memory>

#include "scheduler/decoding_policy.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

// Null when --recycle-drafts is 0.
std::unique_ptr<DecodingPolicy> MakeRecyclePolicy(const PolicyResources& r);

}  // namespace specline::scheduler
