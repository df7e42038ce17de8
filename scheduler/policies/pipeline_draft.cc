#include "scheduler/policies/pipeline_draft.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/drafters/verify.h"
#include "scheduler/policies/registry.h"
#include "scheduler/sequence_grammar.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

// One drafter call, made on the driver thread without the engine lock; or,
// with no drafter, a draft already decided (a token the grammar forces).
struct DrafterCall : DraftWork {
  Drafter* drafter = nullptr;
  DraftJob job;
  void Run() override {
    if (!drafter) return;
    try {
      drafter->Propose(job);
    } catch (const std::exception& e) {
      job.status = absl::InternalError(e.what());
    }
  }
};

// Keeps q's mass on the tokens the grammar allows, renormalised: a draft
// the grammar let through was drawn from q conditioned on being allowed,
// and rejection sampling is lossless only against the q it came from.
void RestrictToAllowed(TokenDistribution& q, std::span<const uint32_t> allowed) {
  if (allowed.empty() || q.ids.empty()) return;
  TokenDistribution kept;
  double mass = 0;
  for (size_t i = 0; i < q.ids.size(); ++i) {
    if (!TokenAllowed(allowed, q.ids[i])) continue;
    kept.ids.push_back(q.ids[i]);
    kept.probs.push_back(q.probs[i]);
    mass += q.probs[i];
  }
  if (kept.ids.size() == q.ids.size() || mass <= 0) return;
  for (float& p : kept.probs) p = static_cast<float>(p / mass);
  q = std::move(kept);
}

}  // namespace

const char* DraftGateName(DraftGate p) {
  switch (p) {
    case DraftGate::kNever: return "never";
    case DraftGate::kAlways: return "always";
    case DraftGate::kAuto: return "auto";
  }
  return "?";
}

PipelineDraftPolicy::PipelineDraftPolicy(PolicyHost& host, v1::DecodingPolicy mode, DraftRules rules,
                                         std::unique_ptr<Drafter> drafter,
                                         std::unique_ptr<Drafter> oracle)
    : DecodingPolicy(host),
      oracle_(std::move(oracle)),
      mode_(mode),
      rules_(rules),
      drafter_(std::move(drafter)) {}

absl::Status PipelineDraftPolicy::Validate(const RequestOptions& r) const {
  if (r.oracle.enabled || drafter_) return absl::OkStatus();
  return NotServed(mode_);
}

absl::Status PipelineDraftPolicy::AvailableLocked(const RequestOptions& r) const {
  if ((r.oracle.enabled ? oracle_ : drafter_) != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "policy ", PolicyShortName(mode_), " is not available on this deployment yet"));
}

void PipelineDraftPolicy::Attach(Sequence& s, const PreparedRequest* /*prepared*/) {
  DecodingPolicy::Attach(s, nullptr);
  auto st = std::make_unique<DraftChainState>();
  const uint64_t seed = s.sampling.seed;
  // The drafter's stream must not share uniforms with the verifier's.
  st->spec.draft_rng = Rng(seed ^ 0x9e3779b97f4a7c15ULL);
  const OracleOptions* oracle = s.origin ? &s.origin->oracle : nullptr;
  if (oracle && oracle->enabled) {
    st->oracle = std::make_unique<OracleDrafter>(oracle->alpha, seed ^ 0xd1b54a32d192ed03ULL);
    st->reference = &oracle->reference;  // immutable after Submit
    st->drafter = oracle_.get();
  } else {
    st->drafter = drafter_.get();
  }
  st->spec.acceptance_ema = pooled_acceptance_;
  s.policy_state = std::move(st);
}

void PipelineDraftPolicy::QueueRelease(Drafter* d, uint64_t seq_id) {
  std::lock_guard<std::mutex> lock(release_mu_);
  releases_.emplace_back(d, seq_id);
}

void PipelineDraftPolicy::RetireLocked(Sequence& s) {
  auto& st = PolicyStateOf<DraftChainState>(s);
  // Drafts still in flight are never shown; their slots run out harmlessly
  // and the release the engine sends frees their KV.
  RecordDiscarded(s, static_cast<int64_t>(st.spec.drafts.size()));
  st.spec.drafts.clear();
  st.spec.taps.clear();
  if (st.drafter) QueueRelease(st.drafter, s.id);
}

void PipelineDraftPolicy::ReleaseRetired() {
  std::vector<std::pair<Drafter*, uint64_t>> releases;
  {
    std::lock_guard<std::mutex> lock(release_mu_);
    releases.swap(releases_);
  }
  for (auto& [drafter, seq] : releases) drafter->Release(seq);
}

int32_t PipelineDraftPolicy::ChainEnd(const Sequence& s) const {
  return static_cast<int32_t>(s.tokens.size() +
                              PolicyStateOf<DraftChainState>(s).spec.drafts.size());
}

bool PipelineDraftPolicy::WantsDraftLocked(const Sequence& s) const {
  const auto& st = PolicyStateOf<DraftChainState>(s);
  if (!st.drafter || s.finished() || s.state != SeqState::kDecode || s.pending() > 0) return false;
  if (static_cast<int>(st.spec.drafts.size()) >= rules_.max_drafts) return false;
  if (st.spec.no_draft_at == s.chain_end()) return false;  // asked already: no guess
  // A draft for position p is useful only if p can still be generated.
  if (s.RoomAheadFrom(s.chain_end()) <= 0) return false;
  if (s.grammar) {
    if (s.grammar->ChainEndTerminated()) return false;
    // A token the grammar forces is a draft with nothing to guess.
    if (!s.grammar->Forced(1).empty()) return true;
  }
  switch (rules_.when) {
    case DraftGate::kNever: return false;
    case DraftGate::kAlways: break;
    case DraftGate::kAuto:
      // Other requests can fill the pipeline: their tokens are all useful.
      if (host_.RunningLocked() >= host_.max_inflight()) return false;
      if (!DraftPaysLocked(st)) return false;
      break;
  }
  return st.drafter->Ready(st.spec, static_cast<int32_t>(s.tokens.size()));
}

bool PipelineDraftPolicy::DraftPaysLocked(const DraftChainState& st) const {
  const SpecState& spec = st.spec;
  // A sequence that always drafts never shows what a plain token costs: now
  // and then it lets one plain gap pass (a token or two without a draft),
  // so t_plain stays measured.
  const int plain_every = pace_.Samples(TokenGap::kPlain) < DraftPace::kMinSamples
                              ? rules_.probe_interval
                              : 8 * rules_.probe_interval;
  if (st.pace.tokens_since_plain_gap() >= plain_every) return false;
  // Until every gap is measured, the configured floor decides.
  const double needed = pace_.BreakEven().value_or(rules_.min_acceptance);
  if (spec.acceptance_ema >= needed) return true;
  // Below it, a probe draft now and then keeps the sequence's acceptance
  // and the pace current. Where no acceptance pays (needed > 1: one stage,
  // or stages starved of cores) a probe only refreshes the pace: rarer.
  const int interval = needed > 1 ? 4 * rules_.probe_interval : rules_.probe_interval;
  return spec.tokens_since_draft >= interval;
}

void PipelineDraftPolicy::ObservePaceLocked(DraftChainState& st, bool accepted, bool drafting) {
  const auto now = SequencePace::Clock::now();
  const std::optional<double> seconds = st.pace.SecondsSince(now);
  // Gaps under a full pipeline measure the other requests, not drafting
  // (auto drafts nothing there).
  if (seconds && host_.RunningLocked() < host_.max_inflight()) {
    const TokenGap gap = st.pace.Gap();
    pace_.Observe(gap, *seconds);
    st.pace.Counted(gap);
    prometheus::Gauge*& gauge = interval_gauges_[static_cast<size_t>(gap)];
    if (!gauge) gauge = metrics().TokenInterval(TokenGapName(gap));
    gauge->Set(pace_.Mean(gap));
    if (const std::optional<double> be = pace_.BreakEven()) {
      metrics().break_even_acceptance->Set(*be);
    }
  }
  st.pace.Token(now, accepted, drafting);
}

void PipelineDraftPolicy::RecordShareLocked(SpecState& spec, bool accepted) {
  const double x = accepted ? 1.0 : 0.0;
  // About the last 10 tokens: at weight 0.2 a sequence at 0.5 dipped below
  // a break-even of 0.3 after two rejections in a row and sat out a probe
  // interval, forgoing half its drafts (spec_bench, alpha 0.5).
  spec.acceptance_ema += kSequenceRate * (x - spec.acceptance_ema);
  pooled_acceptance_ += DraftPace::kRate * (x - pooled_acceptance_);
}

std::unique_ptr<DraftWork> PipelineDraftPolicy::GatherDraftLocked(
    const std::shared_ptr<Sequence>& sp) {
  Sequence& s = *sp;
  auto& st = PolicyStateOf<DraftChainState>(s);
  st.pace.DraftAsked();
  auto call = std::make_unique<DrafterCall>();
  call->drafter = st.drafter;
  DraftJob& j = call->job;
  if (s.grammar) {
    if (std::vector<int32_t> forced = s.grammar->Forced(1); !forced.empty()) {
      call->drafter = nullptr;  // decided: no drafter call
      j.seq_id = s.id;
      j.epoch = s.epoch;
      j.end = s.chain_end();
      j.draft = DraftToken{forced[0], {}};
      j.fed = st.spec.fed;
      j.rng = st.spec.draft_rng;
      return call;
    }
    const std::span<const uint32_t> allowed = s.grammar->ChainEndMask();
    j.allowed.assign(allowed.begin(), allowed.end());
  }
  j.seq_id = s.id;
  j.epoch = s.epoch;
  j.end = s.chain_end();
  j.verified = static_cast<int32_t>(s.tokens.size());
  j.first = std::min(st.spec.fed, j.end - 1);
  j.prompt_len = s.prompt_len;
  j.vocab_size = host_.config().vocab_size;
  j.chain = s.tokens;
  for (const DraftToken& d : st.spec.drafts) j.chain.push_back(d.token);
  j.cache_scope = s.cache_scope;
  j.sampling = s.sampling;
  for (int32_t p = j.first; p < j.end; ++p) {
    auto it = st.spec.taps.find(p);
    j.taps.push_back(it == st.spec.taps.end() ? std::map<int, std::vector<float>>{} : it->second);
  }
  j.rng = st.spec.draft_rng;
  j.oracle = st.oracle.get();
  j.reference = st.reference;
  return call;
}

void PipelineDraftPolicy::ApplyDraftLocked(Sequence& s, DraftWork& work) {
  auto& st = PolicyStateOf<DraftChainState>(s);
  DraftJob& j = static_cast<DrafterCall&>(work).job;
  if (!j.status.ok()) {
    // Speculation is an optimisation: the request goes on plainly.
    spdlog::warn("request {} (seq {}): drafter {} failed, decoding plainly from here: {}",
                 s.request_id, s.id, st.drafter ? st.drafter->name() : "?", j.status.ToString());
    if (st.drafter) QueueRelease(st.drafter, s.id);
    st.drafter = nullptr;
    return;
  }
  // The sequence moved while the drafter ran (a flush, or a token the
  // receiver decided): this draft is for a position that no longer exists.
  if (s.epoch != j.epoch || s.chain_end() != j.end) return;
  SpecState& sp = st.spec;
  if (j.none) {
    sp.no_draft_at = j.end;
    return;
  }
  if (s.grammar) {
    // Drafts the grammar forbids are cut here: position j.end is decided
    // by the target alone.
    if (!s.grammar->AddDraft(j.draft.token)) {
      sp.no_draft_at = j.end;
      return;
    }
    RestrictToAllowed(j.draft.q, s.grammar->MaskAt(s.grammar->drafts() - 1));
  }
  sp.draft_rng = j.rng;
  sp.fed = j.fed;
  sp.taps.erase(sp.taps.begin(), sp.taps.lower_bound(sp.fed));
  if (sp.drafts.empty()) {
    ++s.stats.drafts;
    metrics().drafts->Increment();
  }
  sp.drafts.push_back(std::move(j.draft));
  sp.tokens_since_draft = 0;
  ++s.stats.draft_tokens;
  metrics().draft_tokens->Increment();
  if (j.source) RecordDraftSource(s, j.source, 1);
}

void PipelineDraftPolicy::WriteRows(Sequence& s, const SlotRun& r, BatchRows& out) {
  const auto& drafts = PolicyStateOf<DraftChainState>(s).spec.drafts;
  const auto verified = static_cast<int32_t>(s.tokens.size());
  for (int32_t i = 0; i < r.count; ++i) {
    const int32_t pos = r.first_pos + i;
    out.Add(s.id, pos, s.epoch, pos < verified ? s.tokens[pos] : drafts[pos - verified].token);
  }
}

std::vector<int> PipelineDraftPolicy::TapLayers(const Sequence& s) const {
  const Drafter* d = PolicyStateOf<DraftChainState>(s).drafter;
  return d ? d->TapLayers() : std::vector<int>{};
}

// Keeps the taps of still-valid slots the drafter may still read (a slot
// from before a flush that kept its position is still valid:
// SpecState::TapsValid).
void PipelineDraftPolicy::StoreTap(Sequence& s, uint32_t row_epoch, int32_t pos, int layer,
                                   std::span<const float> row) {
  auto& st = PolicyStateOf<DraftChainState>(s);
  if (!st.drafter || !st.spec.TapsValid(row_epoch, s.epoch, pos)) return;
  if (pos < st.spec.fed || pos >= s.chain_end()) return;
  st.spec.taps[pos][layer].assign(row.begin(), row.end());
}

WantedRows PipelineDraftPolicy::Wanted(const SlotRun& r) const {
  WantedRows w = DecodingPolicy::Wanted(r);
  const Drafter* d = PolicyStateOf<DraftChainState>(*r.seq).drafter;
  w.logits = d && d->WantsLogits();
  return w;
}

void PipelineDraftPolicy::DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) {
  if (r.first_pos + r.count != static_cast<int32_t>(s.tokens.size())) return;
  // A drafter that learns from the target sees every verified row.
  Drafter* d = PolicyStateOf<DraftChainState>(s).drafter;
  if (d && d->WantsLogits() && !out.logits.empty()) {
    d->Observe(s, s.tokens.back(), out.logits.first(host_.config().vocab_size));
  }
  const std::span<const float> row =
      out.logits.empty() ? out.logits : out.logits.first(host_.config().vocab_size);
  DecideTokenLocked(s, row, out.greedy.empty() ? -1 : out.greedy[0]);
}

void PipelineDraftPolicy::DecideTokenLocked(Sequence& s, std::span<const float> logits,
                                            int32_t greedy_token) {
  DraftChainState& st = PolicyStateOf<DraftChainState>(s);
  SpecState& sp = st.spec;
  SpecStats& stats = s.stats;
  const int n = host_.n_stages();
  // Greedy (with or without penalty) consumes no randomness.
  auto target = [&] {
    return greedy_token >= 0 ? greedy_token
                             : Sample(logits, s.sampling, s.SamplingContextFor(s.tokens), s.rng);
  };
  if (sp.drafts.empty()) {
    stats.cycles += n;  // decided by a token that crossed the whole pipeline alone
    ++sp.tokens_since_draft;
    // A draft asked for and not ready in time (or no guess) is a miss: the
    // token came fresh although the sequence drafts.
    const bool missed = st.pace.draft_asked();
    if (missed) RecordShareLocked(sp, false);
    ObservePaceLocked(st, false, missed);
    host_.EmitTokenLocked(s, target(), logits);
    return;
  }
  DraftToken d = std::move(sp.drafts.front());
  sp.drafts.pop_front();
  VerifyResult v;
  if (s.sampling.greedy()) {
    v = VerifyGreedy(target(), d.token);
  } else {
    const TokenDistribution p = Warp(logits, s.sampling, s.SamplingContextFor(s.tokens));
    if (d.q.ids.empty()) d.q = {{d.token}, {1.0f}};  // a point-mass draft
    v = VerifyDraft(p, d.q, d.token, s.rng);
  }
  const int index = sp.chain_index++;
  // Recent accepted share, for the auto rule (a short memory: acceptance
  // changes with the text).
  RecordShareLocked(sp, v.accepted);
  ++sp.tokens_since_draft;
  ObservePaceLocked(st, v.accepted, !v.accepted);
  if (v.accepted) {
    ++stats.accepted_tokens;
    stats.cycles += 1;
    if (static_cast<int>(stats.accepted_per_pos.size()) <= index) {
      stats.accepted_per_pos.resize(index + 1);
    }
    ++stats.accepted_per_pos[index];
    metrics().accepted_tokens->Increment();
    metrics().AcceptedAtPosition(index)->Increment();
  } else {
    ++stats.rejected_tokens;
    stats.cycles += n;  // the replacement starts down the pipeline now
    metrics().flushes->Increment();
    FlushLocked(s);
  }
  if (sp.drafts.empty()) sp.chain_index = 0;
  // The verified row decides the token, accepted draft or replacement: its
  // logprobs are the target's.
  host_.EmitTokenLocked(s, v.token, logits);
}

// Rejection: every draft in flight is void. The replacement goes next at
// position tokens.size() with a new epoch; stages drop the old epoch's
// slots (told at once by a notice) and roll their caches back when the
// replacement is written; drafter state rolls back through `fed`.
void PipelineDraftPolicy::FlushLocked(Sequence& s) {
  SpecState& sp = PolicyStateOf<DraftChainState>(s).spec;
  RecordDiscarded(s, static_cast<int64_t>(sp.drafts.size()));
  sp.drafts.clear();
  if (s.grammar) s.grammar->DropDrafts();
  sp.chain_index = 0;
  const int32_t verified = static_cast<int32_t>(s.tokens.size());
  s.cached = verified;
  ++s.epoch;
  sp.flush_history.emplace_back(s.epoch, verified);
  if (sp.flush_history.size() > SpecState::kFlushHistory) sp.flush_history.pop_front();
  sp.taps.erase(sp.taps.lower_bound(verified), sp.taps.end());
  sp.fed = std::min(sp.fed, verified);
  host_.NoticeEpochLocked(s);
}

}  // namespace specline::scheduler
