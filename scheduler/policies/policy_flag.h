// How a decoding policy (or a drafter it owns) declares its command-line
// options, once, next to its factory: the scheduler parses them
// (scheduler/flags.cc), `specline serve` lists and forwards them, and the
// registry builds, refuses and defaults policies from the declarations
// (registry.cc holds the one list).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flag_map.h"
#include "scheduler/decoding_policy.h"
#include "scheduler/policies/resources.h"

namespace specline::scheduler {

struct PolicyFlag {
  const char* name;           // without the leading "--"
  const char* value;          // the value's placeholder in usage: "N", "DIR"
  const char* help;           // "\n" starts a continuation line
  const char* default_shown;  // appended to the help as "(default ...)"; "" = none
  // Parses and validates `value` into the owner's options (SpecOptions::Of),
  // INVALID_ARGUMENT naming the flag otherwise.
  absl::Status (*parse)(const std::string& value, SpecOptions& o);
  // The stages load it too: `specline serve` hands it to its topology
  // (--ptp-head, --pipo-head) rather than to the scheduler alone.
  bool stages_too = false;
};

struct PolicyDeclaration {
  v1::DecodingPolicy mode;
  std::span<const PolicyFlag> flags;
  // Why a deployment does not serve it: the flag that enables it.
  const char* not_served;
  // Null when the flags do not enable the policy; throws
  // std::invalid_argument when they name something unusable.
  std::unique_ptr<DecodingPolicy> (*make)(const PolicyResources& r);
  // Requests that name no policy get this one when it holds (and no
  // --default-policy says otherwise); null: never.
  bool (*default_when)(const SpecOptions& o) = nullptr;
};

// "  --name VALUE   help (default D)", one flag after another, the help
// from column `help_column`.
std::string PolicyFlagUsage(std::span<const PolicyFlag> flags, int help_column);

// A flag whose value is kept as given (a head directory): parse = this.
template <class Options, std::string Options::*field>
absl::Status StoreText(const std::string& value, SpecOptions& o) {
  o.Of<Options>().*field = value;
  return absl::OkStatus();
}

// `text` as a number of at least `min`: "--NAME must be >= MIN" otherwise.
template <typename T>
absl::Status ParseAtLeast(const char* flag, const std::string& text, T min, T* out) {
  absl::Status st = ParseNumber(flag, text, out);
  if (st.ok() && *out < min) {
    st = absl::InvalidArgumentError(absl::StrCat("--", flag, " must be >= ", min));
  }
  return st;
}

}  // namespace specline::scheduler
