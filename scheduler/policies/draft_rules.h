// When pipeline speculation spends slots on drafts: the scheduler's
// --spec-policy and its knobs.
#pragma once

namespace specline::scheduler {

// When a sequence may spend pipeline slots on drafts (docs/speculation.md
// "Policy").
enum class DraftGate {
  kNever,   // decode every sequence plainly
  kAlways,  // draft whenever the sequence has room in the pipeline
  // Draft only while fewer sequences run than micro-batches fit in the
  // pipeline (otherwise other requests fill it), and only while the
  // sequence's recent acceptance pays on the deployment's measured pace
  // (policies/draft_pace.h; min_acceptance until it is measured), else one
  // probe draft every probe_interval tokens. Call-based policies (recycle,
  // PTP) size their drafts by the measured cost curve instead
  // (policies/draft_length.h).
  kAuto,
};
const char* DraftGateName(DraftGate p);

struct DraftRules {
  DraftGate when = DraftGate::kAuto;
  double min_acceptance = 0.3;
  int probe_interval = 16;
  int max_drafts = 1;  // drafts in flight per sequence
};

}  // namespace specline::scheduler
