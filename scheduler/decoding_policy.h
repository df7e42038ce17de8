// A decoding policy: how one family of requests turns pipeline passes into
// tokens. The engine moves micro-batches and knows no policy; at each point
// where methods differ it asks the sequence's policy:
//
//   Submit     Validate, Prepare (once per request, kept for restarts),
//              PromptPositions (KV admission), AvailableLocked
//   admission  Attach: the policy's per-sequence state (Sequence::policy_state)
//   driver     GatherDraftLocked / DraftWork::Run / ApplyDraftLocked (drafts
//              made without the engine lock), PlanDecode / PlanPrefill (the
//              rows the sequence adds to a batch), WriteRows (their inputs),
//              TapLayers (features the drafter wants back)
//   receiver   StoreTap, Wanted (which rows of a run come back to it),
//              DecideLocked (accept, flush, emit)
//   health     OnPipelineUpLocked (what the policy needs of the stages)
//   the end    RetireLocked (free drafter state, count discarded drafts)
//
// One file per policy under scheduler/policies/; policies/registry.cc is
// the only place that maps a method to its policy. docs/architecture.md
// follows one token through these hooks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/batch_rows.h"
#include "scheduler/call_cost_curve.h"
#include "scheduler/metrics.h"
#include "scheduler/policy_host.h"
#include "scheduler/prepared_request.h"
#include "scheduler/sequence.h"
#include "scheduler/slot_run.h"
#include "specline/internal/stage.pb.h"

namespace specline::scheduler {

// The per-sequence state a policy owns (Sequence::policy_state); each policy
// derives its own and reads it back with PolicyStateOf.
struct PolicyState {
  virtual ~PolicyState() = default;
};

template <typename T>
T& PolicyStateOf(Sequence& s) {
  return static_cast<T&>(*s.policy_state);
}
template <typename T>
const T& PolicyStateOf(const Sequence& s) {
  return static_cast<const T&>(*s.policy_state);
}

// Work a policy does for one sequence on the driver thread without the
// engine lock (a drafter's forward pass). Gathered and applied under it.
struct DraftWork {
  virtual ~DraftWork() = default;
  virtual void Run() = 0;
};

// Which rows of a run the receiver hands back to the policy: `used` rows
// from chain position `first`; the last `aux` of them as argmax only (an
// auxiliary row's proposal), the others as a token decision (logits, or the
// argmax alone for a greedy request without penalty). A policy that reads
// the last stage's hidden states itself (ReadsHidden) gets the raw rows.
struct WantedRows {
  int32_t first = 0;
  int32_t used = 0;
  int32_t aux = 0;
  // Logits for the decision rows even when the request is greedy (a
  // drafter that learns from the target's distribution).
  bool logits = false;
};

// What came back for one run.
struct RunOutput {
  std::span<const int32_t> greedy;  // one token per decision row (greedy requests)
  std::span<const float> logits;    // vocab logits per decision row (otherwise)
  std::span<const int32_t> aux;     // argmax of each auxiliary row
  std::span<const float> hidden;    // ReadsHidden: dim floats per row
  CallShare share;                  // what else the stages carry meanwhile
};

class DecodingPolicy {
 public:
  explicit DecodingPolicy(PolicyHost& host) : host_(host) {}
  virtual ~DecodingPolicy() = default;
  DecodingPolicy(const DecodingPolicy&) = delete;
  DecodingPolicy& operator=(const DecodingPolicy&) = delete;

  virtual v1::DecodingPolicy mode() const = 0;
  const char* name() const { return PolicyShortName(mode()); }
  // Whether requests may ask for it (false: only with an oracle, in tests).
  virtual bool advertised() const { return true; }

  // --- Requests: any thread, no engine lock.
  // What only this policy reads, and whether this deployment serves it.
  virtual absl::Status Validate(const RequestOptions& r) const;
  // Once per request before it queues, kept for its restarts (PIPO
  // compresses the prompt here): a PreparedRequest of the policy's own
  // type, read back with PreparedAs. May return null.
  virtual absl::StatusOr<std::shared_ptr<const PreparedRequest>> Prepare(
      const RequestOptions& r);
  // KV positions the prompt takes on the stages.
  virtual int32_t PromptPositions(const RequestOptions& r, const PreparedRequest* prepared) const;

  // --- The rest runs with the engine lock held unless it says otherwise.
  // Whether the current pipeline can serve the policy (FAILED_PRECONDITION).
  virtual absl::Status AvailableLocked(const RequestOptions& /*r*/) const { return absl::OkStatus(); }
  // The stages came up: check what the policy needs of them.
  virtual void OnPipelineUpLocked(const std::vector<internal::StageInfo>& /*infos*/) {}
  // A new attempt of a request: set s.policy_state (and anything else per sequence).
  virtual void Attach(Sequence& s, const PreparedRequest* prepared);
  // The sequence left the engine (finished, failed, or restarted anew).
  virtual void RetireLocked(Sequence& /*s*/) {}
  // Driver thread, no lock, before each batch: free what RetireLocked queued.
  virtual void ReleaseRetired() {}

  // What the prompt's rows run with on the stages, so that prefix caching
  // (docs/prefix_caching.md) keys their KV by it; nullopt when the sequence
  // cannot skip computing a cached prompt prefix (its policy reads the
  // prompt rows' outputs or taps itself, as PIPO's MTP layer and drafters
  // fed from taps do).
  virtual std::optional<RowModel> PromptKvModel(const Sequence& /*s*/) const {
    return RowModel{};
  }

  // The end of the chain of inputs (tokens, then drafts or pairs).
  virtual int32_t ChainEnd(const Sequence& s) const;
  // Whether a token past the context length ends the sequence (false when
  // positions are not tokens, as PIPO's pairs): Sequence::MayGenerateAt asks.
  virtual bool LimitedByContext() const { return true; }
  // Whether every token it emits is decided under the sequence's grammar
  // mask (Sequence::grammar), drafts included (structured output). Policies
  // that do not are refused requests with a response format.
  virtual bool KeepsGrammar() const { return false; }

  // Drafting: whether the driver should ask for a draft now, the work, and
  // its result (dropped when the sequence moved meanwhile).
  virtual bool WantsDraftLocked(const Sequence& /*s*/) const { return false; }
  virtual std::unique_ptr<DraftWork> GatherDraftLocked(const std::shared_ptr<Sequence>& /*s*/) {
    return nullptr;
  }
  virtual void ApplyDraftLocked(Sequence& /*s*/, DraftWork& /*work*/) {}

  // The run this sequence adds to the next batch: its decode step within
  // `budget` rows, or its next prefill chunk of `chunk` positions (count 0:
  // nothing this time).
  virtual SlotRun PlanDecode(const std::shared_ptr<Sequence>& s, int32_t budget) const;
  virtual SlotRun PlanPrefill(const std::shared_ptr<Sequence>& s, int32_t chunk,
                              int32_t budget) const;
  // The run's inputs, one Add per row. Called once per run sent.
  virtual void WriteRows(Sequence& s, const SlotRun& r, BatchRows& out);
  // Prompt tokens the run carries (the prompt-tokens counter).
  virtual int32_t PromptTokens(const Sequence& s, const SlotRun& r) const;
  // Layers whose outputs the stages should send back for this sequence.
  virtual std::vector<int> TapLayers(const Sequence& /*s*/) const { return {}; }
  // One tap row of a valid slot (the policy checks its epoch and position).
  virtual void StoreTap(Sequence& /*s*/, uint32_t /*row_epoch*/, int32_t /*pos*/, int /*layer*/,
                        std::span<const float> /*row*/) {}

  // The receiver reads the last stage's hidden rows for this policy rather
  // than logits (all of a run's rows, also prompt rows).
  virtual bool ReadsHidden() const { return false; }
  virtual WantedRows Wanted(const SlotRun& r) const;
  // Decides tokens from the run's outputs. Called for live sequences whose
  // epoch is the run's (ReadsHidden: whenever the sequence is live).
  virtual void DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) = 0;

 protected:
  // A call that verified `drafted` proposals and kept the first `accepted`:
  // one chain, its tokens, the accepted positions, and, when one was
  // rejected, a flush that discards the rest (PTP, recycle).
  void RecordVerifiedCall(Sequence& s, int drafted, int accepted);
  // Counts `n` drafts dropped unverified (a flush, a finish), in the
  // sequence's counters and the policy's metric alike.
  void RecordDiscarded(Sequence& s, int64_t n);
  // Counts one proposal of `tokens` drafts sent from `source` (a drafter's
  // source name), in the sequence's counters and the policy's metric.
  void RecordDraftSource(Sequence& s, const std::string& source, int64_t tokens);
  // The policy's counters (label policy=name()).
  SchedulerMetrics::Spec& metrics() { return host_.SpecMetrics(name()); }
  PolicyHost& host_;
};

}  // namespace specline::scheduler
