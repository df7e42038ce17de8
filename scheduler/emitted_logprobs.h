// The log-probabilities streamed with an emitted token (SubmitEvent.logprobs).
#pragma once

#include <cstdint>
#include <span>

#include "specline/v1/generation.pb.h"
#include "scheduler/sequence.h"

namespace specline::scheduler {

// `token`'s entry, from the target row that decided it, processed with the
// context of s.tokens (call it before appending the token). A row that is
// missing (a policy bug: every policy hands its row over when the request
// wants logprobs) gives a NaN logprob, which the gateway reports as null,
// rather than a made-up number.
v1::TokenLogprob LogprobOfRow(const Sequence& s, int32_t token, std::span<const float> row);

}  // namespace specline::scheduler
