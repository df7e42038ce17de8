// The short names of decoding policies used on command lines and in the
// HTTP API (ar, ppsd, spd, pipo, ptp, recycle), and whether a policy is
// lossless: both read from the options on DecodingPolicy's values in
// generation.proto, the one place they are declared.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "specline/v1/generation.pb.h"

namespace specline {

// "" -> UNSPECIFIED (the server's default); an unknown name is
// INVALID_ARGUMENT listing the known ones.
absl::StatusOr<v1::DecodingPolicy> PolicyFromName(std::string_view name);
// The short name of a policy ("" for UNSPECIFIED).
const char* PolicyShortName(v1::DecodingPolicy policy);
// Every short name, for messages: "ar, ppsd, spd, pipo, ptp or recycle".
const std::string& PolicyNames();
// Whether the policy's output is plain decoding's (token for token when
// greedy, in distribution when sampling). False for UNSPECIFIED.
bool PolicyIsLossless(v1::DecodingPolicy policy);

}  // namespace specline
