#include "scheduler/policies/registry.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "scheduler/policies/autoregressive.h"
#include "scheduler/policies/pipo.h"
#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/spd.h"

namespace specline::scheduler {
namespace {

// The flag that gives each method its head.
const char* HeadFlag(SpecMode mode) {
  switch (mode) {
    case SpecMode::kAutoregressive: return "";
    case SpecMode::kPpsd: return "ppsd-head";
    case SpecMode::kSpd: return "spd-head";
    case SpecMode::kPtp: return "ptp-head";
    case SpecMode::kPipo: return "pipo-head";
  }
  return "";
}

}  // namespace

std::vector<std::unique_ptr<DecodingPolicy>> MakePolicies(const PolicyResources& r) {
  std::vector<std::unique_ptr<DecodingPolicy>> policies;
  policies.push_back(std::make_unique<AutoregressivePolicy>(r.host));
  for (auto make : {MakePpsdPolicy, MakeSpdPolicy, MakePtpPolicy, MakePipoPolicy}) {
    if (auto p = make(r)) policies.push_back(std::move(p));
  }
  const SpecMode want = r.options.default_mode;
  if (std::none_of(policies.begin(), policies.end(),
                   [&](const auto& p) { return p->mode() == want && p->advertised(); })) {
    throw std::invalid_argument(absl::StrCat(
        "the default policy ", SpecModeName(want),
        " needs its head (--ppsd-head / --spd-head / --ptp-head / --pipo-head)"));
  }
  return policies;
}

absl::Status ValidatePolicyFields(const RequestSpec& r, const SpecOptions& options,
                                  int vocab_size) {
  const OracleSpec& o = r.oracle;
  if (o.enabled) {
    if (!options.allow_oracle) {
      return absl::InvalidArgumentError(
          "oracle: oracle drafting is for tests and benchmarks (start the scheduler with "
          "--allow-oracle)");
    }
    if (r.mode != SpecMode::kPpsd && r.mode != SpecMode::kSpd) {
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
  if (r.pipo_tau >= 0 && r.mode != SpecMode::kPipo) {
    return absl::InvalidArgumentError("pipo_tau: applies to policy PIPO only");
  }
  return absl::OkStatus();
}

absl::Status NotServed(SpecMode mode) {
  return absl::FailedPreconditionError(absl::StrCat("policy ", absl::AsciiStrToUpper(SpecModeName(mode)),
                                                    " is not available on this deployment (the "
                                                    "scheduler has no --",
                                                    HeadFlag(mode), ")"));
}

}  // namespace specline::scheduler
