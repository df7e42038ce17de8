// The Scheduler gRPC API's request -> the engine's RequestSpec: proto
// defaults (0 means "off" for top_p and repetition_penalty), the decoding
// policy, and a random seed when none is given.
#pragma once

#include "absl/status/statusor.h"
#include "scheduler/sequence.h"
#include "specline/internal/scheduler.pb.h"

namespace specline::scheduler {

// INVALID_ARGUMENT naming the field for bad sampling values;
// FAILED_PRECONDITION for a policy this deployment does not run (only
// autoregressive decoding exists until issue 4). The prompt is checked
// against the model by Engine::Validate.
absl::StatusOr<RequestSpec> ToRequestSpec(const internal::SubmitRequest& req);

}  // namespace specline::scheduler
