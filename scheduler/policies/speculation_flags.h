// The speculation knobs every drafting policy shares (SpecOptions' own
// fields), declared as the policies declare theirs (policy_flag.h).
#pragma once

#include <span>

#include "scheduler/policies/policy_flag.h"

namespace specline::scheduler {

std::span<const PolicyFlag> SpeculationFlags();

}  // namespace specline::scheduler
