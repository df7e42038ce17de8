// Pipeline speculation (docs/speculation.md), shared by PPSD and SPD: the
// driver asks a drafter for the next token of a sequence that has room in
// the pipeline and sends it one micro-batch behind its predecessor; when
// the newest verified token comes back, its logits verify the oldest
// draft (lossless: greedy equality, or rejection sampling), and a rejection
// flushes the chain (new epoch, stages drop the stale slots, caches roll
// back implicitly). PPSD and SPD differ only in their drafter
// (policies/ppsd.cc, policies/spd.cc).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/drafters/oracle_drafter.h"
#include "scheduler/decoding_policy.h"
#include "scheduler/policies/draft_pace.h"
#include "scheduler/policies/draft_rules.h"
#include "scheduler/policies/pipeline_drafter.h"

namespace specline::scheduler {

// Per sequence: the chain of drafts and the drafter that makes them.
struct DraftChainState : PolicyState {
  SpecState spec;
  Drafter* drafter = nullptr;  // null: decodes plainly (its drafter failed)
  std::unique_ptr<OracleDrafter> oracle;  // oracle requests only
  const std::vector<int32_t>* reference = nullptr;  // the oracle's truth (the request's)
  SequencePace pace;  // the gaps between its tokens, for the auto gate
};

class PipelineDraftPolicy : public DecodingPolicy {
 public:
  // `drafter` serves requests (null: oracle requests only); `oracle` the
  // requests that ask for the oracle (null until known, or not allowed).
  PipelineDraftPolicy(PolicyHost& host, v1::DecodingPolicy mode, DraftRules rules,
                      std::unique_ptr<Drafter> drafter, std::unique_ptr<Drafter> oracle);

  v1::DecodingPolicy mode() const override { return mode_; }
  bool advertised() const override { return drafter_ != nullptr; }
  bool KeepsGrammar() const override { return true; }
  absl::Status Validate(const RequestOptions& r) const override;
  absl::Status AvailableLocked(const RequestOptions& r) const override;
  void Attach(Sequence& s, const PreparedRequest* prepared) override;
  void RetireLocked(Sequence& s) override;
  void ReleaseRetired() override;
  int32_t ChainEnd(const Sequence& s) const override;
  bool WantsDraftLocked(const Sequence& s) const override;
  std::unique_ptr<DraftWork> GatherDraftLocked(const std::shared_ptr<Sequence>& s) override;
  void ApplyDraftLocked(Sequence& s, DraftWork& work) override;
  void WriteRows(Sequence& s, const SlotRun& r, BatchRows& out) override;
  std::vector<int> TapLayers(const Sequence& s) const override;
  // A drafter fed from taps needs every prompt position's features, so
  // its sequences compute the whole prompt.
  std::optional<RowModel> PromptKvModel(const Sequence& s) const override {
    if (!TapLayers(s).empty()) return std::nullopt;
    return RowModel{};
  }
  void StoreTap(Sequence& s, uint32_t row_epoch, int32_t pos, int layer,
                std::span<const float> row) override;
  WantedRows Wanted(const SlotRun& r) const override;
  void DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) override;

 protected:
  std::unique_ptr<Drafter> oracle_;

 private:
  // Verifies the oldest draft against the target's output (or samples
  // when there is none) and emits the verified token.
  void DecideTokenLocked(Sequence& s, std::span<const float> logits, int32_t greedy_token);
  void FlushLocked(Sequence& s);
  // Under `auto`: whether the sequence's acceptance pays on this
  // deployment's measured pace (else one probe now and then).
  bool DraftPaysLocked(const DraftChainState& st) const;
  // The gap since the sequence's previous token, into the pace; the new
  // token was an accepted draft or not, and leaves the sequence drafting
  // or not.
  void ObservePaceLocked(DraftChainState& st, bool accepted, bool drafting);
  // A token arrived as an accepted draft (1) or not (0) while the sequence
  // drafted: the share the gate weighs against the pace.
  void RecordShareLocked(SpecState& spec, bool accepted);
  void QueueRelease(Drafter* d, uint64_t seq_id);

  v1::DecodingPolicy mode_;
  DraftRules rules_;
  std::unique_ptr<Drafter> drafter_;
  static constexpr double kSequenceRate = 0.1;  // weight of a token in a sequence's share
  DraftPace pace_;  // over this policy's sequences (engine lock)
  std::array<prometheus::Gauge*, 3> interval_gauges_{};  // by TokenGap, on first use
  // The accepted share over this policy's recent drafting tokens: where a
  // new sequence's own estimate starts (engine lock).
  double pooled_acceptance_ = 0.5;
  std::mutex release_mu_;  // RetireLocked (engine lock) -> ReleaseRetired (driver)
  std::vector<std::pair<Drafter*, uint64_t>> releases_;
};

}  // namespace specline::scheduler
