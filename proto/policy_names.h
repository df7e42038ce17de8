// The short names of decoding policies used on command lines (the CLI's
// --policy, the load tester's, the scheduler's --default-policy docs):
// ar, ppsd, spd, pipo, ptp, recycle.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "specline/v1/generation.pb.h"

namespace specline {

// "" -> UNSPECIFIED (the server's default); an unknown name is
// INVALID_ARGUMENT listing the known ones.
absl::StatusOr<v1::DecodingPolicy> PolicyFromName(std::string_view name);
// The short name of a policy ("" for UNSPECIFIED).
const char* PolicyShortName(v1::DecodingPolicy policy);

inline constexpr const char* kPolicyNames = "ar, ppsd, spd, pipo, ptp or recycle";

}  // namespace specline
