// Training-free draft-then-verify (docs/drafters.md), as vLLM's n-gram
// speculation does it: the sequence's next call carries the newest token
// and k drafts as k + 1 rows of one micro-batch; each row samples the
// target's token as plain decoding would (the argmax, or one uniform from
// the request's stream) and the draft is kept iff it equals that token, so
// the output is plain decoding's, token for token for a given seed. The
// drafts come from suffix matches over the request's own text and recent
// requests' texts, else Token Recycling, whose matrix learns from every
// verified row. One call in flight per sequence: the stages overwrite the
// rejected rows' KV when the next call writes them (implicit rollback, as
// for PTP). k is the count that maximises expected tokens per unit of time
// (DraftLengthRule, DraftGate::kAuto), from the measured cost of a call by
// rows and each source's learnt acceptance: none where drafts do not pay.
#pragma once

#include <memory>

#include "scheduler/policies/policy_flag.h"

namespace specline::scheduler {

struct RecycleOptions {
  int drafts = 8;  // --recycle-drafts: drafts per call at most (0 = not served)
};

// Its flags (its own and its drafter's, TrainingFreeDrafterOptions) and
// factory.
const PolicyDeclaration& RecycleDeclaration();

// Null when --recycle-drafts is 0.
std::unique_ptr<DecodingPolicy> MakeRecyclePolicy(const PolicyResources& r);

// The training-free drafter its flags describe (SPD's --spd-drafter recycle
// shares it: PolicyResources::training_free).
std::shared_ptr<TrainingFreeDrafter> MakeTrainingFreeDrafter(const PolicyResources& r);

}  // namespace specline::scheduler
