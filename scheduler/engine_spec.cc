// Engine: pipeline speculation. The driver asks drafters for the next token
// of sequences that have room in the pipeline; the receiver verifies the
// oldest draft of a sequence against the logits of the token before it,
// and flushes on rejection. See docs/speculation.md.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/runtime/verify.h"
#include "scheduler/engine.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

const char* SpecPolicyName(SpecPolicy p) {
  switch (p) {
    case SpecPolicy::kNever: return "never";
    case SpecPolicy::kAlways: return "always";
    case SpecPolicy::kAuto: return "auto";
  }
  return "?";
}

std::vector<SpecMode> Engine::modes() const {
  std::vector<SpecMode> m = {SpecMode::kAutoregressive};
  if (ppsd_) m.push_back(SpecMode::kPpsd);
  if (spd_) m.push_back(SpecMode::kSpd);
  if (ptp_head_) m.push_back(SpecMode::kPtp);
  if (pipo_) m.push_back(SpecMode::kPipo);
  return m;
}

Drafter* Engine::DrafterFor(SpecMode mode, bool oracle) const {
  switch (mode) {
    case SpecMode::kAutoregressive: return nullptr;
    case SpecMode::kPpsd: return oracle ? oracle_ppsd_.get() : ppsd_.get();
    case SpecMode::kSpd: return oracle ? oracle_spd_.get() : spd_.get();
    case SpecMode::kPtp: return nullptr;  // the stages themselves propose (engine_ptp.cc)
    case SpecMode::kPipo: return nullptr;  // no drafts: pairs (engine_pipo.cc)
  }
  return nullptr;
}

bool Engine::WantsDraftLocked(const Sequence& s) const {
  if (!s.drafter || s.finished() || s.state != SeqState::kDecode || s.pending() > 0) return false;
  if (static_cast<int>(s.spec.drafts.size()) >= max_drafts_) return false;
  // A draft for position p is useful only if p can still be generated.
  const int32_t p = s.chain_end();
  if (p >= config().max_seq_len || p - s.prompt_len >= s.max_tokens) return false;
  switch (options_.spec.policy) {
    case SpecPolicy::kNever: return false;
    case SpecPolicy::kAlways: break;
    case SpecPolicy::kAuto:
      // Other requests can fill the pipeline: their tokens are all useful.
      if (static_cast<int>(running_.size()) >= options_.max_inflight) return false;
      if (s.spec.acceptance_ema < options_.spec.min_acceptance &&
          s.spec.tokens_since_draft < options_.spec.probe_interval) {
        return false;
      }
      break;
  }
  return s.drafter->Ready(s);
}

std::vector<DraftJob> Engine::GatherDraftJobsLocked() {
  std::vector<DraftJob> jobs;
  for (const auto& sp : running_) {
    Sequence& s = *sp;
    if (!WantsDraftLocked(s)) continue;
    DraftJob& j = jobs.emplace_back();
    j.seq = sp;
    j.seq_id = s.id;
    j.epoch = s.epoch;
    j.end = s.chain_end();
    j.verified = static_cast<int32_t>(s.tokens.size());
    j.first = std::min(s.spec.fed, j.end - 1);
    j.prompt_len = s.prompt_len;
    j.vocab_size = config().vocab_size;
    j.chain.reserve(j.end);
    for (int32_t p = 0; p < j.end; ++p) j.chain.push_back(s.chain_token(p));
    j.sampling = s.sampling;
    for (int32_t p = j.first; p < j.end; ++p) {
      auto it = s.spec.taps.find(p);
      j.taps.push_back(it == s.spec.taps.end() ? std::map<int, std::vector<float>>{}
                                               : it->second);
    }
    j.rng = s.spec.draft_rng;
    j.oracle = s.oracle.get();
    j.reference = &s.oracle_spec.reference;  // immutable after Submit
  }
  return jobs;
}

// Driver thread, without the lock: drafters only touch their own state.
void Engine::RunDrafters(std::vector<DraftJob>& jobs) {
  for (DraftJob& j : jobs) {
    try {
      j.seq->drafter->Propose(j);
    } catch (const std::exception& e) {
      j.status = absl::InternalError(e.what());
    }
  }
}

void Engine::ApplyDraftsLocked(std::vector<DraftJob>& jobs) {
  for (DraftJob& j : jobs) {
    Sequence& s = *j.seq;
    if (s.finished()) continue;
    if (!j.status.ok()) {
      // Speculation is an optimisation: the request goes on plainly.
      spdlog::warn("request {} (seq {}): drafter {} failed, decoding plainly from here: {}",
                   s.request_id, s.id, s.drafter->name(), j.status.ToString());
      drafter_releases_.emplace_back(s.drafter, s.id);
      s.drafter = nullptr;
      continue;
    }
    // The sequence moved while the drafter ran (a flush, or a token the
    // receiver decided): this draft is for a position that no longer exists.
    if (s.epoch != j.epoch || s.chain_end() != j.end) continue;
    s.spec.draft_rng = j.rng;
    s.spec.fed = j.fed;
    s.spec.taps.erase(s.spec.taps.begin(), s.spec.taps.lower_bound(s.spec.fed));
    if (s.spec.drafts.empty()) {
      ++s.spec.stats.drafts;
      SpecMetrics(s).drafts->Increment();
    }
    s.spec.drafts.push_back(std::move(j.draft));
    s.spec.tokens_since_draft = 0;
    ++s.spec.stats.draft_tokens;
    SpecMetrics(s).draft_tokens->Increment();
  }
}

std::vector<int> Engine::TapLayersFor(const std::vector<SlotRun>& runs) const {
  std::vector<int> layers;
  for (const SlotRun& r : runs) {
    if (!r.seq->drafter) continue;
    for (int l : r.seq->drafter->TapLayers()) {
      if (std::find(layers.begin(), layers.end(), l) == layers.end()) layers.push_back(l);
    }
  }
  return layers;
}

// Keeps the taps of still-valid slots a drafter may still read (a slot from
// before a flush that kept its position is still valid: SpecState::TapsValid).
void Engine::StoreTapsLocked(const internal::MicroBatch& batch) {
  const int n = batch.seq_ids_size();
  if (batch.taps_size() == 0 || batch.positions_size() != n || batch.epochs_size() != n) return;
  const int dim = config().dim;
  Sequence* s = nullptr;
  for (int i = 0; i < n; ++i) {
    if (!s || s->id != batch.seq_ids(i)) {
      auto it = std::find_if(running_.begin(), running_.end(),
                             [&](const auto& q) { return q->id == batch.seq_ids(i); });
      s = it == running_.end() ? nullptr : it->get();
    }
    if (!s || !s->drafter) continue;
    const int32_t pos = batch.positions(i);
    if (!s->spec.TapsValid(batch.epochs(i), s->epoch, pos)) continue;
    if (pos < s->spec.fed || pos >= s->chain_end()) continue;
    for (const internal::TapData& t : batch.taps()) {
      if (t.hidden().size() != static_cast<size_t>(n) * dim * sizeof(float)) continue;
      const float* row = reinterpret_cast<const float*>(t.hidden().data()) + int64_t{i} * dim;
      s->spec.taps[pos][t.layer()].assign(row, row + dim);
    }
  }
}

void Engine::DecideTokenLocked(Sequence& s, std::span<const float> logits,
                               int32_t greedy_token) {
  SpecState& sp = s.spec;
  const int n = n_stages();
  // Greedy (with or without penalty) consumes no randomness. A PTP
  // sequence samples every token from its counter-based u (its first token
  // comes from the prompt's last row, before any PTP call).
  auto target = [&] {
    if (greedy_token >= 0) return greedy_token;
    if (s.mode == SpecMode::kPtp) {
      return PtpTeacherToken(s, {}, logits);
    }
    return Sample(logits, s.sampling, s.tokens, s.rng);
  };
  if (sp.drafts.empty()) {
    sp.stats.cycles += n;  // decided by a token that crossed the whole pipeline alone
    ++sp.tokens_since_draft;
    EmitTokenLocked(s, target());
    return;
  }
  DraftToken d = std::move(sp.drafts.front());
  sp.drafts.pop_front();
  VerifyResult v;
  if (s.sampling.greedy()) {
    v = VerifyGreedy(target(), d.token);
  } else {
    const TokenDistribution p = Warp(logits, s.sampling, s.tokens);
    if (d.q.ids.empty()) d.q = {{d.token}, {1.0f}};  // a point-mass draft
    v = VerifyDraft(p, d.q, d.token, s.rng);
  }
  const int index = sp.chain_index++;
  // Recent acceptance, for the auto policy (a short memory: acceptance
  // changes with the text).
  sp.acceptance_ema = 0.8 * sp.acceptance_ema + 0.2 * (v.accepted ? 1.0 : 0.0);
  ++sp.tokens_since_draft;
  if (v.accepted) {
    ++sp.stats.accepted_tokens;
    sp.stats.cycles += 1;
    if (static_cast<int>(sp.stats.accepted_per_pos.size()) <= index) {
      sp.stats.accepted_per_pos.resize(index + 1);
    }
    ++sp.stats.accepted_per_pos[index];
    SpecMetrics(s).accepted_tokens->Increment();
    SpecMetrics(s).AcceptedAtPosition(index)->Increment();
  } else {
    ++sp.stats.rejected_tokens;
    sp.stats.cycles += n;  // the replacement starts down the pipeline now
    SpecMetrics(s).flushes->Increment();
    FlushLocked(s);
  }
  if (sp.drafts.empty()) sp.chain_index = 0;
  EmitTokenLocked(s, v.token);
}

// Rejection: every draft in flight is void. The replacement goes next at
// position tokens.size() with a new epoch; stages drop the old epoch's
// slots (told at once by a notice) and roll their caches back when the
// replacement is written; drafter state rolls back through `fed`.
void Engine::FlushLocked(Sequence& s) {
  SpecState& sp = s.spec;
  sp.stats.discarded_tokens += static_cast<int64_t>(sp.drafts.size());
  SpecMetrics(s).discarded_tokens->Increment(static_cast<double>(sp.drafts.size()));
  sp.drafts.clear();
  sp.chain_index = 0;
  const int32_t verified = static_cast<int32_t>(s.tokens.size());
  s.cached = verified;
  ++s.epoch;
  sp.flush_history.emplace_back(s.epoch, verified);
  if (sp.flush_history.size() > SpecState::kFlushHistory) sp.flush_history.pop_front();
  sp.taps.erase(sp.taps.lower_bound(verified), sp.taps.end());
  sp.fed = std::min(sp.fed, verified);
  notices_.emplace_back(s.id, s.epoch);
}

void Engine::SendNotices(std::vector<Notice> notices) {
  if (notices.empty()) return;
  internal::MicroBatch m;
  m.set_kind(internal::MicroBatch::EPOCH);
  for (const auto& [seq, epoch] : notices) {
    m.add_seq_ids(seq);
    m.add_epochs(epoch);
  }
  const std::string wire = m.SerializeAsString();
  std::lock_guard<std::mutex> lock(notice_mu_);
  // Best effort: a lost notice only means a stage computes a stale slot.
  for (auto& sender : notice_senders_) (void)sender->Send(wire);
}

void Engine::ReleaseDrafterState() {
  std::vector<std::pair<Drafter*, uint64_t>> releases;
  {
    std::lock_guard<std::mutex> lock(mu_);
    releases.swap(drafter_releases_);
  }
  for (auto& [drafter, seq] : releases) drafter->Release(seq);
}

SchedulerMetrics::Spec& Engine::SpecMetrics(const Sequence& s) {
  return metrics_->ForPolicy(SpecModeName(s.mode));
}

void Engine::RecordSpecFinishLocked(const Sequence& s) {
  const SpecStats& st = s.spec.stats;
  if (s.mode == SpecMode::kAutoregressive || st.cycles == 0) return;
  SpecMetrics(s).equivalent_acceptance_length->Observe(
      static_cast<double>(n_stages()) * s.generated() / static_cast<double>(st.cycles));
}

}  // namespace specline::scheduler
