#include "scheduler/policies/recycle.h"

#include <algorithm>
#include <cmath>

#include "model/drafters/verify.h"
#include "model/runtime/sampler.h"
#include "scheduler/sequence_grammar.h"

namespace specline::scheduler {
namespace {

struct RecycleState : PolicyState {
  std::vector<int32_t> drafts;  // for positions tokens.size() ...
  // Recent share of drafts accepted (it sets k under the auto gate); starts
  // neutral, as pipeline speculation's does.
  double acceptance_ema = 0.5;
  int tokens_since_draft = 0;
};

class RecyclePolicy : public DecodingPolicy {
 public:
  RecyclePolicy(PolicyHost& host, DraftRules rules, std::shared_ptr<TrainingFreeDrafter> drafter)
      : DecodingPolicy(host), rules_(rules), drafter_(std::move(drafter)) {}

  v1::DecodingPolicy mode() const override { return v1::DECODING_POLICY_RECYCLE; }
  bool KeepsGrammar() const override { return true; }

  void Attach(Sequence& s, const PreparedRequest* /*prepared*/) override {
    DecodingPolicy::Attach(s, nullptr);
    s.policy_state = std::make_unique<RecycleState>();
  }
  void RetireLocked(Sequence& s) override {
    auto& st = PolicyStateOf<RecycleState>(s);
    RecordDiscarded(s, static_cast<int64_t>(st.drafts.size()));
    st.drafts.clear();
  }

  // The newest token and the drafts (as many as fit the budget).
  SlotRun PlanDecode(const std::shared_ptr<Sequence>& s, int32_t budget) const override {
    const auto drafts = static_cast<int32_t>(PolicyStateOf<RecycleState>(*s).drafts.size());
    const int32_t rows = std::min(s->pending() + drafts, budget);
    SlotRun r{s, s->cached, rows, rows >= s->pending(), s->epoch};
    r.output_rows = rows;
    return r;
  }
  void WriteRows(Sequence& s, const SlotRun& r, BatchRows& out) override {
    auto& drafts = PolicyStateOf<RecycleState>(s).drafts;
    const auto verified = static_cast<int32_t>(s.tokens.size());
    // The drafts the budget left out are dropped: the call verifies what it carries.
    drafts.resize(std::max(0, r.first_pos + r.count - verified));
    if (s.grammar) s.grammar->KeepDrafts(static_cast<int>(drafts.size()));
    for (int32_t i = 0; i < r.count; ++i) {
      const int32_t pos = r.first_pos + i;
      out.Add(s.id, pos, s.epoch, pos < verified ? s.tokens[pos] : drafts[pos - verified]);
    }
  }
  // Logits of every decision row, also for greedy requests: the matrix
  // learns the target's top candidates from them.
  WantedRows Wanted(const SlotRun& r) const override {
    WantedRows w = DecodingPolicy::Wanted(r);
    w.logits = true;
    return w;
  }
  void DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) override;

 private:
  // The next call's drafts: the tokens the grammar forces, then the
  // matrix's guesses after them, cut at the first one the grammar forbids.
  std::vector<int32_t> ProposeLocked(Sequence& s, int guesses, int most);

  // Drafts for the next call: none, a probe, or up to k by recent acceptance.
  int DraftCount(const RecycleState& st) const;

  DraftRules rules_;
  std::shared_ptr<TrainingFreeDrafter> drafter_;
};

bool IsStop(const Sequence& s, int32_t token) {
  return std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end();
}

int RecyclePolicy::DraftCount(const RecycleState& st) const {
  const int k = rules_.max_drafts;
  switch (rules_.when) {
    case DraftGate::kNever: return 0;
    case DraftGate::kAlways: return k;
    case DraftGate::kAuto: break;
  }
  const double a = st.acceptance_ema;
  if (a < rules_.min_acceptance) {
    return st.tokens_since_draft >= rules_.probe_interval ? 1 : 0;
  }
  // The j-th draft is kept with probability about a^j: draft while that
  // stays above the threshold.
  if (a >= 0.999) return k;
  const int j = static_cast<int>(std::floor(std::log(rules_.min_acceptance) / std::log(a)));
  return std::clamp(j, 1, k);
}

void RecyclePolicy::DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) {
  auto& st = PolicyStateOf<RecycleState>(s);
  // Defensive: the call ends at the newest token plus the drafts it carried.
  const int32_t first = r.first_pos + r.verify_rows() - r.output_rows;
  if (first + 1 != static_cast<int32_t>(s.tokens.size()) ||
      r.output_rows != static_cast<int32_t>(st.drafts.size()) + 1 || out.logits.empty()) {
    return;
  }
  const std::vector<int32_t> drafts = std::move(st.drafts);
  st.drafts.clear();
  const int m = static_cast<int>(drafts.size());
  const int vocab = host_.config().vocab_size;
  auto row = [&](int i) { return out.logits.subspan(int64_t{i} * vocab, vocab); };
  // Rows verify in order: row i's distribution follows the newest token
  // and the i drafts before it, all accepted so far.
  std::vector<int32_t> history = s.tokens;
  int a = 0;
  int32_t next = -1;
  for (int i = 0;; ++i) {
    drafter_->Observe(history.back(), row(i));
    // An accepted stop token ends the sequence: nothing after it is
    // decided (under a grammar, nothing is even allowed there).
    if (i > 0 && (IsStop(s, drafts[i - 1]) ||
                  (s.grammar && i == s.grammar->drafts() && s.grammar->ChainEndTerminated()))) {
      break;
    }
    if (i == m) {
      next = Sample(row(i), s.sampling, s.SamplingContextFor(history, i), s.rng);  // the bonus token
      break;
    }
    VerifyResult v;
    if (s.sampling.greedy()) {
      v = VerifyGreedy(Sample(row(i), s.sampling, s.SamplingContextFor(history, i), s.rng), drafts[i]);
    } else {
      v = VerifyDraft(Warp(row(i), s.sampling, s.SamplingContextFor(history, i)), {{drafts[i]}, {1.0f}},
                      drafts[i], s.rng);
    }
    if (!v.accepted) {
      next = v.token;
      break;
    }
    ++a;
    history.push_back(drafts[i]);
  }
  // The rows after a rejection are still the model's next-token
  // distributions after each later draft, in a context that took the
  // rejected one. The matrix keeps no context, so Token Recycling learns
  // from every candidate's row, verified or not.
  for (int j = a + 1; j <= m; ++j) drafter_->Observe(drafts[j - 1], row(j));

  if (m > 0) {
    RecordVerifiedCall(s, m, a);
    st.acceptance_ema = 0.8 * st.acceptance_ema + 0.2 * static_cast<double>(a) / m;
    st.tokens_since_draft = 0;
  }
  st.tokens_since_draft += a + 1;
  s.stats.cycles += host_.n_stages();  // a call crosses the whole pipeline once

  // Token i was decided by row i (the target's verified row).
  for (int i = 0; i < a && !s.finished(); ++i) host_.EmitTokenLocked(s, drafts[i], row(i));
  if (!s.finished() && next >= 0) host_.EmitTokenLocked(s, next, row(a));
  if (s.finished()) return;
  // The stages hold the call's rows; the next call starts at the newest
  // token and overwrites the rejected drafts' positions.
  s.cached = static_cast<int32_t>(s.tokens.size()) - 1;
  // A draft at position p is worth sending only if p can still be generated.
  const int room = s.RoomAheadFrom(static_cast<int32_t>(s.tokens.size()));
  const int n = std::min(DraftCount(st), room);
  if (s.grammar) {
    st.drafts = ProposeLocked(s, n, std::min(room, rules_.max_drafts));
  } else if (n > 0) {
    st.drafts = drafter_->Propose(s.tokens, n).tokens;
  }
}

std::vector<int32_t> RecyclePolicy::ProposeLocked(Sequence& s, int guesses, int most) {
  // Forced tokens cost nothing to guess, so they are drafted whatever the
  // gate says; the matrix's guesses only as many as the gate allows.
  std::vector<int32_t> drafts = s.grammar->Forced(most);
  const int more = std::min(guesses, most - static_cast<int>(drafts.size()));
  if (more > 0) {
    std::vector<int32_t> chain = s.tokens;
    chain.insert(chain.end(), drafts.begin(), drafts.end());
    for (int32_t t : drafter_->Propose(chain, more).tokens) drafts.push_back(t);
  }
  size_t kept = 0;
  while (kept < drafts.size() && s.grammar->AddDraft(drafts[kept])) ++kept;
  drafts.resize(kept);
  return drafts;
}

}  // namespace

std::unique_ptr<DecodingPolicy> MakeRecyclePolicy(const PolicyResources& r) {
  if (r.options.recycle_drafts <= 0 || !r.training_free) return nullptr;
  DraftRules rules = r.draft_rules();
  rules.max_drafts = r.options.recycle_drafts;
  return std::make_unique<RecyclePolicy>(r.host, rules, r.training_free);
}

}  // namespace specline::scheduler
