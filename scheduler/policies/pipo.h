// PIPO, pair-in pair-out (docs/pipo.md). Not lossless: a PIPO request
// decodes with a fine-tuned backbone that reads one compressed pair of
// tokens per position and emits the backbone's token plus, when the
// confidence head is sure enough, the MTP head's. The stages run the
// backbone's layers on the pairs' compressor rows (specline-stage
// --pipo-head); this policy runs everything else on the scheduler: the
// compressor, the first token's LM head, the MTP layer (its own KV cache),
// the confidence head and the sampling. A sequence has at most one pair in
// flight (the next pair is its own output); other sequences keep the
// pipeline busy.
#pragma once

#include <memory>

#include <string>

#include "scheduler/policies/policy_flag.h"

namespace specline::scheduler {

struct PipoOptions {
  // --pipo-head: the head ("" = none; opt-in per request); every stage must
  // run its backbone (specline-stage --pipo-head).
  std::string head;
  double tau = -1;  // --pipo-tau: the default threshold; < 0 = the head's tau_default
};

// Its flags and factory. The factory gives null without a head, and throws
// std::invalid_argument when the directory is not a PIPO head for this
// model.
const PolicyDeclaration& PipoDeclaration();

}  // namespace specline::scheduler
