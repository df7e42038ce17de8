#include "scheduler/request_convert.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace specline::scheduler {

absl::StatusOr<RequestSpec> ToRequestSpec(const internal::SubmitRequest& req) {
  using v1::DecodingPolicy;
  if (req.policy() != v1::DECODING_POLICY_UNSPECIFIED &&
      req.policy() != v1::DECODING_POLICY_AUTOREGRESSIVE) {
    const std::string name = v1::DecodingPolicy_IsValid(req.policy())
                                 ? v1::DecodingPolicy_Name(req.policy())
                                 : absl::StrCat(static_cast<int>(req.policy()));
    if (!v1::DecodingPolicy_IsValid(req.policy())) {
      return absl::InvalidArgumentError(absl::StrCat("policy: unknown value ", name));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("policy ", name, " is not available on this deployment"));
  }
  RequestSpec spec;
  spec.request_id = req.request_id();
  spec.prompt.assign(req.prompt().begin(), req.prompt().end());
  spec.max_tokens = req.max_tokens();
  spec.stop_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  const v1::SamplingParams& p = req.sampling();
  spec.sampling.temperature = p.temperature();
  spec.sampling.top_k = p.top_k();
  spec.sampling.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  spec.sampling.min_p = p.min_p();
  spec.sampling.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  if (p.has_seed()) {
    spec.sampling.seed = p.seed();
  } else {
    // Unseeded requests must differ from each other; random_device is fine
    // at request rate.
    thread_local std::random_device rd;
    spec.sampling.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  if (std::string err = spec.sampling.Validate(); !err.empty()) {
    return absl::InvalidArgumentError("sampling." + err);
  }
  return spec;
}

}  // namespace specline::scheduler
