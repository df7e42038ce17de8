// PPSD, pipeline-parallel self-speculative decoding (docs/speculation.md):
// an early-exit head drafts the next token once the newest token has
// passed layer E; verification and flushes are pipeline_draft's.
#pragma once

#include <memory>

#include <string>

#include "scheduler/policies/policy_flag.h"

namespace specline::scheduler {

struct PpsdOptions {
  std::string head;  // --ppsd-head: the early-exit head ("" = none)
};

// Its flags and factory. The factory gives null when the deployment has
// neither a PPSD head nor the oracle, and throws std::invalid_argument when
// the head is not a PPSD head.
const PolicyDeclaration& PpsdDeclaration();

}  // namespace specline::scheduler
