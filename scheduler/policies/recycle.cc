#include "scheduler/policies/recycle.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "model/drafters/verify.h"
#include "model/runtime/sampler.h"
#include "scheduler/policies/draft_length.h"
#include "scheduler/sequence_grammar.h"

namespace specline::scheduler {
namespace {

struct RecycleState : PolicyState {
  std::vector<int32_t> drafts;  // for positions tokens.size() ...
  int forced = 0;               // how many of them a grammar forced (certain)
  DraftKind kind;               // where the others came from
  RequestSuffixIndex own_text;  // the prompt and the accepted tokens, for suffix drafts
  // What requests of this one's cache scope taught the drafter (recent
  // texts, the Token Recycling matrix); this request teaches it in turn.
  std::shared_ptr<DrafterMemory> memory;
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
    auto st = std::make_unique<RecycleState>();
    st->memory = drafter_->MemoryFor(s.cache_scope);
    s.policy_state = std::move(st);
  }
  void RetireLocked(Sequence& s) override {
    auto& st = PolicyStateOf<RecycleState>(s);
    RecordDiscarded(s, static_cast<int64_t>(st.drafts.size()));
    st.drafts.clear();
    // Later requests draft from this one's text (the recent-requests index).
    if (s.generated() > 0) drafter_->Remember(*st.memory, s.tokens);
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
  // The next call's drafts into st: the tokens a grammar forces, then the
  // drafter's guesses after them, as many as pay (DraftsWorthSending), cut
  // at the first one the grammar forbids.
  void ProposeLocked(Sequence& s, RecycleState& st, int room, const CallShare& share);

  // Of `available` guesses of `kind`: all (--spec-policy always), none
  // (never), or as many as maximise the expected tokens per unit of time
  // (auto, in a call shared as the last one was; one probe every
  // probe_interval tokens when none pay, so the acceptance estimates stay
  // current).
  int DraftsWorthSending(const RecycleState& st, DraftKind kind, int available,
                         const CallShare& share) const;

  DraftRules rules_;
  std::shared_ptr<TrainingFreeDrafter> drafter_;
  DraftLengthRule length_rule_;  // learnt over every request (engine lock held)
};

bool IsStop(const Sequence& s, int32_t token) {
  return std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end();
}

int RecyclePolicy::DraftsWorthSending(const RecycleState& st, DraftKind kind, int available,
                                      const CallShare& share) const {
  switch (rules_.when) {
    case DraftGate::kNever: return 0;
    case DraftGate::kAlways: return available;
    case DraftGate::kAuto: break;
  }
  const int k = length_rule_.Choose(
      kind, available, [this](int rows) { return host_.CallCost(rows); }, share);
  if (k == 0 && available > 0 && st.tokens_since_draft >= rules_.probe_interval) return 1;
  return k;
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
    drafter_->Observe(*st.memory, history.back(), row(i));
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
    // Sample the target's token here, exactly as plain decoding would (one
    // uniform from the request's stream), and keep the draft iff it is that
    // token. For a point-mass draft this accepts with probability p(draft)
    // and otherwise emits a token from p without the draft, as rejection
    // sampling does (VerifyDraft); unlike it, every emitted token costs one
    // uniform whatever was drafted, so a seed gives plain decoding's output
    // token for token, with drafts or without.
    const VerifyResult v =
        VerifyGreedy(Sample(row(i), s.sampling, s.SamplingContextFor(history, i), s.rng), drafts[i]);
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
  for (int j = a + 1; j <= m; ++j) drafter_->Observe(*st.memory, drafts[j - 1], row(j));

  if (m > 0) {
    RecordVerifiedCall(s, m, a);
    // Forced drafts are certain: only the guesses after them teach the rule.
    if (m > st.forced) length_rule_.Record(st.kind, m - st.forced, std::max(0, a - st.forced));
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
  ProposeLocked(s, st, s.RoomAheadFrom(static_cast<int32_t>(s.tokens.size())), out.share);
}

void RecyclePolicy::ProposeLocked(Sequence& s, RecycleState& st, int room,
                                  const CallShare& share) {
  const int most = std::min(room, rules_.max_drafts);
  st.drafts.clear();
  st.forced = 0;
  st.kind = {};
  if (most <= 0) return;
  // Forced tokens cost nothing to guess, so they are drafted whatever the
  // rule says; the drafter's guesses only as many as pay.
  if (s.grammar) st.drafts = s.grammar->Forced(most);
  st.forced = static_cast<int>(st.drafts.size());
  if (st.forced < most) {
    std::vector<int32_t> chain;
    if (st.forced > 0) {
      chain = s.tokens;
      chain.insert(chain.end(), st.drafts.begin(), st.drafts.end());
    }
    // Forced tokens are certain (the grammar allows nothing else), so the
    // own-text index may take them in ahead of their verification.
    DraftProposal guess = drafter_->Propose(*st.memory, st.forced > 0 ? chain : s.tokens,
                                            most - st.forced, &st.own_text);
    st.kind = {guess.source, guess.match};
    const int send =
        DraftsWorthSending(st, st.kind, static_cast<int>(guess.tokens.size()), share);
    st.drafts.insert(st.drafts.end(), guess.tokens.begin(), guess.tokens.begin() + send);
  }
  if (s.grammar) {
    size_t kept = 0;
    while (kept < st.drafts.size() && s.grammar->AddDraft(st.drafts[kept])) ++kept;
    st.drafts.resize(kept);
    st.forced = std::min(st.forced, static_cast<int>(kept));
  }
  // The drafter's guesses that go out, by where they came from.
  RecordDraftSource(s, DraftSourceName(st.kind.source),
                    static_cast<int64_t>(st.drafts.size()) - st.forced);
}

}  // namespace

std::unique_ptr<DecodingPolicy> MakeRecyclePolicy(const PolicyResources& r) {
  const int drafts = r.options.Of<RecycleOptions>().drafts;
  if (drafts <= 0) return nullptr;
  DraftRules rules = r.draft_rules();
  rules.max_drafts = drafts;
  return std::make_unique<RecyclePolicy>(r.host, rules, r.training_free());
}

std::shared_ptr<TrainingFreeDrafter> MakeTrainingFreeDrafter(const PolicyResources& r) {
  TrainingFreeDrafterOptions t = r.options.Of<TrainingFreeDrafterOptions>();
  t.vocab_size = r.model->config().vocab_size;
  return std::make_shared<TrainingFreeDrafter>(t);
}

namespace {

// The policy's own flag, then its drafter's (SPD's --spd-drafter recycle
// uses the same drafter).
constexpr PolicyFlag kFlags[] = {
    {"recycle-drafts", "N",
     "drafts per call of DECODING_POLICY_RECYCLE, training-free\ndraft-then-verify, at most",
     "8; 0 = not served",
     [](const std::string& v, SpecOptions& o) {
       return ParseAtLeast("recycle-drafts", v, 0, &o.Of<RecycleOptions>().drafts);
     }},
    {"recycle-candidates", "N", "Token Recycling's candidates kept per token", "8",
     [](const std::string& v, SpecOptions& o) {
       return ParseAtLeast("recycle-candidates", v, 1, &o.Of<TrainingFreeDrafterOptions>().k);
     }},
    {"lookup-ngram", "MIN:MAX",
     "n-gram lengths drafted from the request's own text\n(one number: both)", "2:4",
     [](const std::string& v, SpecOptions& o) {
       TrainingFreeDrafterOptions& t = o.Of<TrainingFreeDrafterOptions>();
       const std::vector<std::string> parts = absl::StrSplit(v, ':');
       absl::Status st = ParseNumber("lookup-ngram", parts.front(), &t.min_ngram);
       if (st.ok()) st = ParseNumber("lookup-ngram", parts.back(), &t.max_ngram);
       if (st.ok() && (parts.size() > 2 || t.min_ngram < 1 || t.max_ngram < t.min_ngram)) {
         st = absl::InvalidArgumentError("--lookup-ngram: MIN:MAX with 1 <= MIN <= MAX");
       }
       return st;
     }},
    {"recycle-recent-tokens", "N",
     "recent requests' tokens its drafter matches against, per\n"
     "cache scope (0: only the request's own text)",
     "262144",
     [](const std::string& v, SpecOptions& o) {
       return ParseAtLeast("recycle-recent-tokens", v, int64_t{0},
                           &o.Of<TrainingFreeDrafterOptions>().recent_tokens);
     }},
    {"recycle-memory-mib", "N",
     "what its drafter remembers of every cache scope together\n(recent texts, Token Recycling "
     "matrices); least\nrecently used scopes are dropped past it",
     "512",
     [](const std::string& v, SpecOptions& o) {
       return ParseAtLeast("recycle-memory-mib", v, int64_t{0},
                           &o.Of<TrainingFreeDrafterOptions>().memory_mib);
     }},
};

}  // namespace

const PolicyDeclaration& RecycleDeclaration() {
  // Lossless, needs no head, and measured at least plain decoding's speed
  // on every prompt class at 1 and 2 stages (docs/benchmarks.md, issue 29):
  // the default when served. Its draft-length rule drafts nothing where
  // drafts do not pay.
  static const PolicyDeclaration d{
      v1::DECODING_POLICY_RECYCLE, kFlags, "the scheduler runs with --recycle-drafts 0",
      MakeRecyclePolicy,
      [](const SpecOptions& o) { return o.Of<RecycleOptions>().drafts > 0; }};
  return d;
}

}  // namespace specline::scheduler
