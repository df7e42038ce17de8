// SPD, speculative pipeline decoding (docs/speculation.md): a small
// speculation module drafts at once from whatever depth each in-flight
// token has reached; verification and flushes are pipeline_draft's.
#pragma once

#include <memory>

#include <string>

#include "scheduler/policies/policy_flag.h"

namespace specline::scheduler {

struct SpdOptions {
  std::string head;  // --spd-head: the speculation module ("" = none)
  // --spd-drafter: "module" (the trained module of `head`) or "recycle"
  // (the training-free drafter, no head).
  std::string drafter = "module";
};

// Its flags and factory. The factory gives null when the deployment has
// neither a drafter nor the oracle, and throws std::invalid_argument when
// the head is not an SPD module or was made for another number of stages.
const PolicyDeclaration& SpdDeclaration();

}  // namespace specline::scheduler
