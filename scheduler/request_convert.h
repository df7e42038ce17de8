// The Scheduler gRPC API's request -> the engine's RequestOptions: proto
// defaults (0 means "off" for top_p and repetition_penalty), the decoding
// policy, and a random seed when none is given.
#pragma once

#include "absl/status/statusor.h"
#include "scheduler/sequence.h"
#include "specline/internal/scheduler.pb.h"

namespace specline::scheduler {

// The longest SubmitRequest.cache_scope accepted.
inline constexpr size_t kMaxCacheScopeBytes = 4096;

// INVALID_ARGUMENT naming the field for bad sampling values or an unknown
// policy value. UNSPECIFIED becomes `default_mode`. Whether this deployment
// serves the policy, the oracle and the prompt are checked by
// Engine::Validate.
absl::StatusOr<RequestOptions> ToRequestOptions(
    const internal::SubmitRequest& req,
    v1::DecodingPolicy default_mode = v1::DECODING_POLICY_AUTOREGRESSIVE);

// The final message's counters; n_stages and the generated token count give
// L'acc.
void ToProto(const SpecStats& stats, int n_stages, int generated, v1::SpecDecodeStats* out);

}  // namespace specline::scheduler
