// PPSD, pipeline-parallel self-speculative decoding (docs/speculation.md):
// an early-exit head drafts the next token once the newest token has
// passed layer E; verification and flushes are pipeline_draft's.
#pragma once

#include <memory>

#include "scheduler/decoding_policy.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

// Null when the deployment has neither a PPSD head (--ppsd-head) nor the
// oracle. Throws std::invalid_argument when the head is not a PPSD head.
std::unique_ptr<DecodingPolicy> MakePpsdPolicy(const PolicyResources& r);

}  // namespace specline::scheduler
