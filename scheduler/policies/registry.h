// The one place that maps a decoding method to its policy: which policies a
// deployment serves, and the request fields that belong to one policy.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/decoding_policy.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

// Autoregressive always; every other policy when its head (or, for PPSD and
// SPD, the oracle) is configured. Throws std::invalid_argument when a head
// does not fit the model or the pipeline, or when the default policy has no
// head.
std::vector<std::unique_ptr<DecodingPolicy>> MakePolicies(const PolicyResources& r);

// Fields that only one policy reads, checked whatever policy the request
// names (INVALID_ARGUMENT naming the field).
absl::Status ValidatePolicyFields(const RequestOptions& r, const SpecOptions& options,
                                  int vocab_size);

// Why a deployment without `mode`'s policy refuses a request for it.
absl::Status NotServed(v1::DecodingPolicy mode);

}  // namespace specline::scheduler
