#include "scheduler/policies/registry.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "proto/policy_names.h"
#include "scheduler/policies/autoregressive.h"
#include "scheduler/policies/pipo.h"
#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/recycle.h"
#include "scheduler/policies/spd.h"
#include "scheduler/policies/speculation_flags.h"

namespace specline::scheduler {
namespace {

const PolicyDeclaration* Find(v1::DecodingPolicy mode) {
  for (const PolicyDeclaration* d : PolicyDeclarations()) {
    if (d->mode == mode) return d;
  }
  return nullptr;
}

}  // namespace

std::span<const PolicyDeclaration* const> PolicyDeclarations() {
  static const PolicyDeclaration* const declarations[] = {
      &PpsdDeclaration(), &SpdDeclaration(),     &PtpDeclaration(),
      &PipoDeclaration(), &RecycleDeclaration(),
  };
  return declarations;
}

std::vector<PolicyFlag> AllPolicyFlags() {
  std::span<const PolicyFlag> shared = SpeculationFlags();
  std::vector<PolicyFlag> all(shared.begin(), shared.end());
  for (const PolicyDeclaration* d : PolicyDeclarations()) {
    all.insert(all.end(), d->flags.begin(), d->flags.end());
  }
  return all;
}

const PolicyFlag* FindPolicyFlag(std::string_view name) {
  for (const PolicyFlag& f : SpeculationFlags()) {
    if (name == f.name) return &f;
  }
  for (const PolicyDeclaration* d : PolicyDeclarations()) {
    for (const PolicyFlag& f : d->flags) {
      if (name == f.name) return &f;
    }
  }
  return nullptr;
}

v1::DecodingPolicy DefaultPolicy(const SpecOptions& o) {
  for (const PolicyDeclaration* d : PolicyDeclarations()) {
    if (d->default_when && d->default_when(o)) return d->mode;
  }
  return v1::DECODING_POLICY_AUTOREGRESSIVE;
}

std::vector<std::unique_ptr<DecodingPolicy>> MakePolicies(const PolicyResources& resources) {
  PolicyResources r = resources;
  // Made by the first policy that asks, so a deployment whose policies do
  // not draft with it never holds its tables.
  std::shared_ptr<TrainingFreeDrafter> training_free;
  r.training_free = [&] {
    if (!training_free) training_free = MakeTrainingFreeDrafter(r);
    return training_free;
  };
  std::vector<std::unique_ptr<DecodingPolicy>> policies;
  policies.push_back(std::make_unique<AutoregressivePolicy>(r.host));
  for (const PolicyDeclaration* d : PolicyDeclarations()) {
    if (auto p = d->make(r)) policies.push_back(std::move(p));
  }
  const v1::DecodingPolicy want = r.options.default_mode;
  if (std::none_of(policies.begin(), policies.end(),
                   [&](const auto& p) { return p->mode() == want && p->advertised(); })) {
    const PolicyDeclaration* d = Find(want);
    throw std::invalid_argument(absl::StrCat("the default policy ", PolicyShortName(want),
                                             " is not served: ",
                                             d ? d->not_served : "no such policy"));
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
  const PolicyDeclaration* d = Find(mode);
  return absl::FailedPreconditionError(
      absl::StrCat("policy ", PolicyShortName(mode),
                   " is not available on this deployment (",
                   d ? d->not_served : "no such policy", ")"));
}

}  // namespace specline::scheduler
