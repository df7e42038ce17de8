#include "scheduler/request_convert.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace specline::scheduler {

v1::DecodingPolicy ToPolicy(SpecMode mode) {
  switch (mode) {
    case SpecMode::kAutoregressive: return v1::DECODING_POLICY_AUTOREGRESSIVE;
    case SpecMode::kPpsd: return v1::DECODING_POLICY_PPSD;
    case SpecMode::kSpd: return v1::DECODING_POLICY_SPD;
    case SpecMode::kPtp: return v1::DECODING_POLICY_PTP;
    case SpecMode::kPipo: return v1::DECODING_POLICY_PIPO;
  }
  return v1::DECODING_POLICY_UNSPECIFIED;
}

void ToProto(const SpecStats& st, int n_stages, int generated, v1::SpecDecodeStats* out) {
  out->set_num_drafts(st.drafts);
  out->set_num_draft_tokens(st.draft_tokens);
  out->set_num_accepted_tokens(st.accepted_tokens);
  out->set_num_flushes(st.flushes());
  out->set_num_discarded_tokens(st.discarded_tokens);
  for (int64_t a : st.accepted_per_pos) out->add_num_accepted_tokens_per_pos(a);
  out->set_pipeline_cycles(st.cycles);
  if (st.cycles > 0) {
    out->set_equivalent_acceptance_length(static_cast<double>(n_stages) * generated /
                                          static_cast<double>(st.cycles));
  }
  if (st.drafts > 0) {
    out->set_mean_accepted_length(1.0 + static_cast<double>(st.accepted_tokens) /
                                            static_cast<double>(st.drafts));
  }
}

absl::StatusOr<RequestSpec> ToRequestSpec(const internal::SubmitRequest& req,
                                          SpecMode default_mode) {
  RequestSpec spec;
  switch (req.policy()) {
    case v1::DECODING_POLICY_UNSPECIFIED: spec.mode = default_mode; break;
    case v1::DECODING_POLICY_AUTOREGRESSIVE: spec.mode = SpecMode::kAutoregressive; break;
    case v1::DECODING_POLICY_PPSD: spec.mode = SpecMode::kPpsd; break;
    case v1::DECODING_POLICY_SPD: spec.mode = SpecMode::kSpd; break;
    case v1::DECODING_POLICY_PTP: spec.mode = SpecMode::kPtp; break;
    case v1::DECODING_POLICY_PIPO: spec.mode = SpecMode::kPipo; break;
    default:
      if (!v1::DecodingPolicy_IsValid(req.policy())) {
        return absl::InvalidArgumentError(
            absl::StrCat("policy: unknown value ", static_cast<int>(req.policy())));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "policy ", v1::DecodingPolicy_Name(req.policy()), " is not available on this deployment"));
  }
  if (req.has_oracle()) {
    spec.oracle.enabled = true;
    spec.oracle.alpha = req.oracle().alpha();
    spec.oracle.reference.assign(req.oracle().reference().begin(), req.oracle().reference().end());
  }
  if (req.has_pipo_tau()) {
    if (!(std::isfinite(req.pipo_tau()) && req.pipo_tau() >= 0.0f)) {
      return absl::InvalidArgumentError("pipo_tau: must be a finite number >= 0");
    }
    spec.pipo_tau = req.pipo_tau();
  }
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
