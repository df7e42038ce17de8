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

#include <string>

#include "scheduler/policies/policy_flag.h"

namespace specline::scheduler {

struct PtpOptions {
  // --ptp-head: the adapter ("" = none); every stage must run the same one
  // (specline-stage --ptp-head).
  std::string head;
  int n_aux = 0;  // --ptp-n-aux: auxiliary rows per call; 0 = the adapter's N
};

// Its flags and factory. The factory gives null without a head, and throws
// std::invalid_argument when the directory is not a PTP adapter for this
// model.
const PolicyDeclaration& PtpDeclaration();

}  // namespace specline::scheduler
