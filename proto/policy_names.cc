#include "proto/policy_names.h"

#include <string>

namespace specline {
namespace {

struct Named {
  const char* name;
  v1::DecodingPolicy policy;
};
constexpr Named kPolicies[] = {{"ar", v1::DECODING_POLICY_AUTOREGRESSIVE},
                               {"ppsd", v1::DECODING_POLICY_PPSD},
                               {"spd", v1::DECODING_POLICY_SPD},
                               {"pipo", v1::DECODING_POLICY_PIPO},
                               {"ptp", v1::DECODING_POLICY_PTP},
                               {"recycle", v1::DECODING_POLICY_RECYCLE}};

}  // namespace

absl::StatusOr<v1::DecodingPolicy> PolicyFromName(std::string_view name) {
  if (name.empty()) return v1::DECODING_POLICY_UNSPECIFIED;
  for (const Named& p : kPolicies) {
    if (name == p.name) return p.policy;
  }
  return absl::InvalidArgumentError("--policy: \"" + std::string(name) + "\" is not " +
                                    kPolicyNames);
}

const char* PolicyShortName(v1::DecodingPolicy policy) {
  for (const Named& p : kPolicies) {
    if (policy == p.policy) return p.name;
  }
  return "";
}

}  // namespace specline
