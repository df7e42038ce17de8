// SPD, speculative pipeline decoding (docs/speculation.md): a small
// speculation module drafts at once from whatever depth each in-flight
// token has reached; verification and flushes are pipeline_draft's.
#pragma once

#include <memory>

#include "scheduler/decoding_policy.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

// Null when the deployment has neither an SPD module (--spd-head) nor the
// oracle. Throws std::invalid_argument when the head is not an SPD module
// or was made for another number of stages.
std::unique_ptr<DecodingPolicy> MakeSpdPolicy(const PolicyResources& r);

}  // namespace specline::scheduler
