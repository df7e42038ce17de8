#include "scheduler/request_convert.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "model/runtime/logprobs.h"

namespace specline::scheduler {

void ToProto(const SpecStats& st, int n_stages, int generated, v1::SpecDecodeStats* out) {
  out->set_num_drafts(st.drafts);
  out->set_num_draft_tokens(st.draft_tokens);
  out->set_num_accepted_tokens(st.accepted_tokens);
  out->set_num_flushes(st.flushes());
  out->set_num_discarded_tokens(st.discarded_tokens);
  for (int64_t a : st.accepted_per_pos) out->add_num_accepted_tokens_per_pos(a);
  out->set_pipeline_cycles(st.cycles);
  for (const auto& [source, n] : st.drafts_by_source) (*out->mutable_num_drafts_by_source())[source] = n;
  for (const auto& [source, n] : st.draft_tokens_by_source) {
    (*out->mutable_num_draft_tokens_by_source())[source] = n;
  }
  if (st.cycles > 0) {
    out->set_equivalent_acceptance_length(static_cast<double>(n_stages) * generated /
                                          static_cast<double>(st.cycles));
  }
  if (st.drafts > 0) {
    out->set_mean_accepted_length(1.0 + static_cast<double>(st.accepted_tokens) /
                                            static_cast<double>(st.drafts));
  }
}

absl::StatusOr<RequestOptions> ToRequestOptions(const internal::SubmitRequest& req,
                                          v1::DecodingPolicy default_mode) {
  RequestOptions out;
  // Whether this deployment serves the policy is the engine's question
  // (Engine::Validate).
  if (!v1::DecodingPolicy_IsValid(req.policy())) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy: unknown value ", static_cast<int>(req.policy())));
  }
  out.mode = req.policy() == v1::DECODING_POLICY_UNSPECIFIED ? default_mode : req.policy();
  if (req.has_oracle()) {
    out.oracle.enabled = true;
    out.oracle.alpha = req.oracle().alpha();
    out.oracle.reference.assign(req.oracle().reference().begin(), req.oracle().reference().end());
  }
  if (req.has_pipo_tau()) {
    if (!(std::isfinite(req.pipo_tau()) && req.pipo_tau() >= 0.0f)) {
      return absl::InvalidArgumentError("pipo_tau: must be a finite number >= 0");
    }
    out.pipo_tau = req.pipo_tau();
  }
  // The gateway's encoding of a principal name and a 256-byte cache_salt
  // fits easily; the bound keeps a misbehaving client of the internal API
  // from making every salt computation hash megabytes.
  if (req.cache_scope().size() > kMaxCacheScopeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_scope: longer than ", kMaxCacheScopeBytes, " bytes"));
  }
  out.cache_scope = req.cache_scope();
  out.request_id = req.request_id();
  out.tenant = req.tenant();
  out.prompt.assign(req.prompt().begin(), req.prompt().end());
  out.max_tokens = req.max_tokens();
  out.stop_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  const v1::SamplingParams& p = req.sampling();
  out.sampling.temperature = p.temperature();
  out.sampling.top_k = p.top_k();
  out.sampling.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  out.sampling.min_p = p.min_p();
  out.sampling.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  out.sampling.presence_penalty = p.presence_penalty();
  out.sampling.frequency_penalty = p.frequency_penalty();
  // A proto map has no order: sort by id (SamplingParams::logit_bias), and
  // refuse a large map before copying it.
  if (p.logit_bias_size() > SamplingParams::kMaxLogitBias) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logit_bias: at most ",
                                                   SamplingParams::kMaxLogitBias, " entries"));
  }
  out.sampling.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(out.sampling.logit_bias.begin(), out.sampling.logit_bias.end());
  if (req.has_logprobs() && req.logprobs().enabled()) {
    const int32_t top = req.logprobs().top_logprobs();
    if (top < 0 || top > kMaxTopLogprobs) {
      return absl::InvalidArgumentError(
          absl::StrCat("logprobs.top_logprobs: must be in [0, ", kMaxTopLogprobs, "]"));
    }
    out.top_logprobs = top;
  }
  if (p.has_seed()) {
    out.sampling.seed = p.seed();
  } else {
    // Unseeded requests must differ from each other; random_device is fine
    // at request rate.
    thread_local std::random_device rd;
    out.sampling.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  if (std::string err = out.sampling.Validate(); !err.empty()) {
    return absl::InvalidArgumentError("sampling." + err);
  }
  return out;
}

}  // namespace specline::scheduler
