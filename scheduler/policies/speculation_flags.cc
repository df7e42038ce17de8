#include "scheduler/policies/speculation_flags.h"

#include "proto/policy_names.h"

namespace specline::scheduler {
namespace {

absl::Status ParseDraftGate(const std::string& text, SpecOptions& o) {
  for (DraftGate p : {DraftGate::kAuto, DraftGate::kAlways, DraftGate::kNever}) {
    if (text == DraftGateName(p)) {
      o.policy = p;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--spec-policy: \"", text, "\" is not auto, always or never"));
}

absl::Status ParseDefaultPolicy(const std::string& text, SpecOptions& o) {
  absl::StatusOr<v1::DecodingPolicy> p = PolicyFromName(text);
  if (!p.ok() || *p == v1::DECODING_POLICY_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--default-policy: \"", text, "\" is not ", PolicyNames()));
  }
  o.default_mode = *p;
  return absl::OkStatus();
}

constexpr PolicyFlag kFlags[] = {
    {"default-policy", "P",
     "ar, ppsd, spd, pipo, ptp or recycle: for requests that do\nnot choose",
     "recycle, or ar with --recycle-drafts 0",
     ParseDefaultPolicy},
    {"spec-policy", "P", "auto, always or never: when to draft", "auto", ParseDraftGate},
    {"spec-min-acceptance", "X",
     "until the pipeline's pace is measured, auto drafts\nwhile a request's recent acceptance is at least this",
     "0.3",
     [](const std::string& v, SpecOptions& o) {
       return ParseNumber("spec-min-acceptance", v, &o.min_acceptance);
     }},
    {"spec-probe-interval", "N", "below it, one probe draft every N tokens", "16",
     [](const std::string& v, SpecOptions& o) {
       return ParseNumber("spec-probe-interval", v, &o.probe_interval);
     }},
    {"spec-max-drafts", "N", "drafts in flight per request", "0: stages - 1",
     [](const std::string& v, SpecOptions& o) {
       return ParseNumber("spec-max-drafts", v, &o.max_drafts);
     }},
    {"draft-kv-capacity-tokens", "N",
     "KV positions of the drafters' own caches (PPSD head,\nSPD module), over all requests",
     "8192",
     [](const std::string& v, SpecOptions& o) {
       return ParseNumber("draft-kv-capacity-tokens", v, &o.draft_kv_capacity_tokens);
     }},
    {"allow-oracle", "true|false",
     "accept oracle drafting on the scheduler's internal API\n(tests and benchmarks only)",
     "false",
     [](const std::string& v, SpecOptions& o) {
       return ParseBool("allow-oracle", v, &o.allow_oracle);
     }},
};

}  // namespace

std::span<const PolicyFlag> SpeculationFlags() { return kFlags; }

}  // namespace specline::scheduler
