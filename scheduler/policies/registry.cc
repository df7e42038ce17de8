#include "scheduler/policies/registry.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "scheduler/policies/autoregressive.h"
#include "scheduler/policies/pipo.h"
#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/recycle.h"
#include "scheduler/policies/spd.h"

namespace specline::scheduler {
namespace {

// Why a deployment lacks the policy: the flag that enables it.
std::string Missing(v1::DecodingPolicy mode) {
  switch (mode) {
    case v1::DECODING_POLICY_PPSD: return "the scheduler has no --ppsd-head";
    case v1::DECODING_POLICY_SPD: return "the scheduler has no --spd-head";
    case v1::DECODING_POLICY_PTP: return "the scheduler has no --ptp-head";
    case v1::DECODING_POLICY_PIPO: return "the scheduler has no --pipo-head";
    case v1::DECODING_POLICY_RECYCLE: return "the scheduler runs with --recycle-drafts 0";
    default: return "no such policy";
  }
}

}  // namespace

std::vector<std::unique_ptr<DecodingPolicy>> MakePolicies(const PolicyResources& resources) {
  PolicyResources r = resources;
  const SpecOptions& o = r.options;
  if (o.recycle_drafts > 0 || o.spd_drafter == "recycle") {
    TrainingFreeDrafterOptions t;
    t.vocab_size = r.model->config().vocab_size;
    t.k = o.recycle_candidates;
    t.min_ngram = o.lookup_min_ngram;
    t.max_ngram = o.lookup_max_ngram;
    t.recent_tokens = o.recycle_recent_tokens;
    r.training_free = std::make_shared<TrainingFreeDrafter>(t);
  }
  std::vector<std::unique_ptr<DecodingPolicy>> policies;
  policies.push_back(std::make_unique<AutoregressivePolicy>(r.host));
  for (auto make :
       {MakePpsdPolicy, MakeSpdPolicy, MakePtpPolicy, MakePipoPolicy, MakeRecyclePolicy}) {
    if (auto p = make(r)) policies.push_back(std::move(p));
  }
  const v1::DecodingPolicy want = r.options.default_mode;
  if (std::none_of(policies.begin(), policies.end(),
                   [&](const auto& p) { return p->mode() == want && p->advertised(); })) {
    throw std::invalid_argument(absl::StrCat(
        "the default policy ", PolicyShortName(want),
        " needs its head (--ppsd-head / --spd-head / --ptp-head / --pipo-head)"));
  }
  return policies;
}

absl::Status ValidatePolicyFields(const RequestOptions& r, const SpecOptions& options,
                                  int vocab_size) {
  const OracleOptions& o = r.oracle;
  if (o.enabled) {
    if (!options.allow_oracle) {
      return absl::InvalidArgumentError(
          "oracle: oracle drafting is for tests and benchmarks (start the scheduler with "
          "--allow-oracle)");
    }
    if (r.mode != v1::DECODING_POLICY_PPSD && r.mode != v1::DECODING_POLICY_SPD) {
      return absl::InvalidArgumentError("oracle: needs a drafting policy (PPSD or SPD)");
    }
    if (!(o.alpha >= 0 && o.alpha <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("oracle.alpha: ", o.alpha,
                                                     " is outside [0, 1]"));
    }
    for (size_t i = 0; i < o.reference.size(); ++i) {
      if (o.reference[i] < 0 || o.reference[i] >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("oracle.reference[", i, "]: token id ",
                                                       o.reference[i], " is outside the vocabulary"));
      }
    }
  }
  if (r.pipo_tau >= 0 && r.mode != v1::DECODING_POLICY_PIPO) {
    return absl::InvalidArgumentError("pipo_tau: applies to policy PIPO only");
  }
  return absl::OkStatus();
}

absl::Status NotServed(v1::DecodingPolicy mode) {
  return absl::FailedPreconditionError(
      absl::StrCat("policy ", absl::AsciiStrToUpper(PolicyShortName(mode)),
                   " is not available on this deployment (", Missing(mode), ")"));
}

}  // namespace specline::scheduler
