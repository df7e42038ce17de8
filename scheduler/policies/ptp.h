// PTP, parallel token prediction (docs/ptp.md). A PTP sequence has at most
// one call in the pipeline: the newest token and the previous call's
// proposals as token rows (the teacher verifies them), then N auxiliary
// rows whose inputs are the u's of the next indices (the stages embed them
// and apply the adapter's LoRA; their argmax are the next proposals).
// Every token is the coupled sample of the teacher at its own
// counter-based u, so the output is plain decoding at those u's whatever
// the proposals: the policy is lossless by construction.
#pragma once

#include <memory>

#include "scheduler/decoding_policy.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

// Null without --ptp-head. Throws std::invalid_argument when the directory
// is not a PTP adapter for this model.
std::unique_ptr<DecodingPolicy> MakePtpPolicy(const PolicyResources& r);

}  // namespace specline::scheduler
