// The Scheduler gRPC API's request -> the engine's RequestSpec: proto
// defaults (0 means "off" for top_p and repetition_penalty), the decoding
// policy, and a random seed when none is given.
#pragma once

#include "absl/status/statusor.h"
#include "scheduler/sequence.h"
#include "specline/internal/scheduler.pb.h"

namespace specline::scheduler {

// INVALID_ARGUMENT naming the field for bad sampling values;
// FAILED_PRECONDITION for a policy the engine has no implementation of
// (PIPO, PTP). UNSPECIFIED becomes `default_mode`. Whether this deployment
// has the heads a policy needs, the oracle and the prompt are checked by
// Engine::Validate.
absl::StatusOr<RequestSpec> ToRequestSpec(const internal::SubmitRequest& req,
                                          SpecMode default_mode = SpecMode::kAutoregressive);

v1::DecodingPolicy ToPolicy(SpecMode mode);
// The final message's counters; n_stages and the generated token count give
// L'acc.
void ToProto(const SpecStats& stats, int n_stages, int generated, v1::SpecDecodeStats* out);

}  // namespace specline::scheduler
