// The one place that maps a decoding method to its policy: the list of
// policy declarations (policy_flag.h), which policies a deployment serves,
// and the request fields that belong to one policy.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/decoding_policy.h"
#include "scheduler/policies/policy_flag.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

// Every policy but autoregressive (always served, no options).
std::span<const PolicyDeclaration* const> PolicyDeclarations();

// The shared speculation flags, then every policy's, in declaration order:
// what specline-scheduler parses beyond its core flags, and what
// `specline serve` lists and forwards.
std::vector<PolicyFlag> AllPolicyFlags();
// Null when no declaration has a flag of that name.
const PolicyFlag* FindPolicyFlag(std::string_view name);

// For requests that name no policy when --default-policy is not given: the
// first declaration whose default_when holds, else autoregressive.
v1::DecodingPolicy DefaultPolicy(const SpecOptions& o);

// Autoregressive always; every other policy its declaration's factory
// makes (its flags enable it). Throws std::invalid_argument when a head does
// not fit the model or the pipeline, or when the default policy is not
// served (naming the flag that would serve it).
std::vector<std::unique_ptr<DecodingPolicy>> MakePolicies(const PolicyResources& r);

// Fields that only one policy reads, checked whatever policy the request
// names (INVALID_ARGUMENT naming the field).
absl::Status ValidatePolicyFields(const RequestOptions& r, const SpecOptions& options,
                                  int vocab_size);

// Why a deployment without `mode`'s policy refuses a request for it.
absl::Status NotServed(v1::DecodingPolicy mode);

}  // namespace specline::scheduler
