#include "scheduler/policies/ptp.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "model/drafters/ptp_adapter.h"
#include "model/runtime/ptp_coupling.h"
#include "scheduler/policies/draft_length.h"
#include "scheduler/policies/draft_rules.h"
#include "scheduler/policies/stage_check.h"

namespace specline::scheduler {
namespace {

// The proposals the last call made, verified by the next one.
struct PtpState : PolicyState {
  int aux = 0;  // auxiliary rows the next call carries (AuxRowsWorthSending)
  std::vector<int32_t> proposals;  // for positions tokens.size() ...
  int tokens_since_aux = 0;  // tokens decided since a call last carried auxiliary rows
};

// The auxiliary rows are PTP's drafts; the draft-length rule sizes them
// (one estimate set per policy: PTP's rows are one kind of draft).
constexpr DraftKind kAuxRows{};

class PtpPolicy : public DecodingPolicy {
 public:
  PtpPolicy(PolicyHost& host, std::string head_dir, uint64_t fingerprint, int n_aux,
            DraftRules rules)
      : DecodingPolicy(host), head_dir_(std::move(head_dir)), fingerprint_(fingerprint),
        n_aux_(n_aux), rules_(rules) {}

  v1::DecodingPolicy mode() const override { return v1::DECODING_POLICY_PTP; }

  absl::Status AvailableLocked(const RequestOptions& /*r*/) const override {
    if (!unavailable_.empty()) return absl::FailedPreconditionError(unavailable_);
    return absl::OkStatus();
  }
  void OnPipelineUpLocked(const std::vector<internal::StageInfo>& infos) override {
    StageModel adapter = FindStageAdapter(host_, infos, fingerprint_, "PTP", head_dir_);
    adapter_id_ = adapter.id;
    unavailable_ = std::move(adapter.unavailable);
  }
  void Attach(Sequence& s, const PreparedRequest* /*prepared*/) override {
    DecodingPolicy::Attach(s, nullptr);
    auto st = std::make_unique<PtpState>();
    st->aux = AuxRowsWorthSending(*st, {}, 1.0);
    s.policy_state = std::move(st);
  }

  // A call in decode is never split: it is skipped when it does not fit.
  SlotRun PlanDecode(const std::shared_ptr<Sequence>& s, int32_t budget) const override {
    const int32_t teacher =
        s->pending() + static_cast<int32_t>(PolicyStateOf<PtpState>(*s).proposals.size());
    if (teacher > budget) return {s, s->cached, 0};
    return Call(s, teacher, teacher, budget);
  }
  // The prompt's last chunk carries the first call's auxiliary rows.
  SlotRun PlanPrefill(const std::shared_ptr<Sequence>& s, int32_t chunk,
                      int32_t budget) const override {
    const int32_t n = std::min({s->pending(), chunk, budget});
    if (n == s->pending()) return Call(s, n, 1, budget);
    return DecodingPolicy::PlanPrefill(s, chunk, budget);
  }

  // Token rows carry a token or a pending proposal; an auxiliary row's
  // token is a placeholder: stage 0 embeds its u.
  void WriteRows(Sequence& s, const SlotRun& r, BatchRows& out) override {
    const auto& proposals = PolicyStateOf<PtpState>(s).proposals;
    const auto verified = static_cast<int32_t>(s.tokens.size());
    for (int32_t i = 0; i < r.count; ++i) {
      const int32_t pos = r.first_pos + i;
      if (i >= r.verify_rows()) {
        out.Add(s.id, pos, s.epoch, 0,
                {.adapter = adapter_id_,
                 .adapter_arg = static_cast<float>(PtpUniform(s.sampling.seed, pos - s.prompt_len))});
      } else {
        out.Add(s.id, pos, s.epoch, pos < verified ? s.tokens[pos] : proposals[pos - verified]);
      }
    }
  }

  void DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) override;

 private:
  // `tokens` token rows from the sequence's cached length (the last
  // `teacher` of them yield logits), then as many auxiliary rows as the
  // budget and the sequence's limit allow.
  static SlotRun Call(const std::shared_ptr<Sequence>& s, int32_t tokens, int32_t teacher,
                      int32_t budget) {
    SlotRun r{s, s->cached, tokens, true, s->epoch};
    r.output_rows = teacher;
    r.aux = std::clamp<int32_t>(std::min(PolicyStateOf<PtpState>(*s).aux, budget - tokens), 0,
                                s->RoomAheadFrom(s->cached + tokens));
    r.count += r.aux;
    return r;
  }
  // The teacher's token after the committed tokens and `accepted` (this
  // call's proposals accepted so far) from its logits, under the request's
  // coupled sampling at the u of its generated index.
  int32_t TeacherToken(const Sequence& s, std::span<const int32_t> accepted,
                       std::span<const float> logits) const;
  // What the calls taught the rule: proposals judged now (their first
  // auxiliary row's check passed in the call before), or a failed check.
  void RecordLocked(int verified, int accepted, int aux, bool checked);
  // Auxiliary rows for the next call: all (--spec-policy always), none
  // (never), or as many as maximise the expected tokens per unit of time
  // on the measured cost curve (auto), in a call shared as the last one
  // was and carrying `st.proposals`; a probe of two rows now and then
  // when none pay, so the estimates stay current.
  int AuxRowsWorthSending(const PtpState& st, const CallShare& share, double live) const;

  std::string head_dir_;
  uint64_t fingerprint_;
  uint32_t adapter_id_ = 0;  // the stages' id of the adapter (OnPipelineUpLocked)
  int n_aux_;
  DraftRules rules_;
  DraftLengthRule length_rule_;  // learnt over every request (engine lock held)
  std::string unavailable_ = "the pipeline is not up";
};

int32_t PtpPolicy::TeacherToken(const Sequence& s, std::span<const int32_t> accepted,
                                std::span<const float> logits) const {
  // The history a penalty sees: the committed tokens, then the proposals
  // accepted before this one (committed too once the call is decided).
  std::vector<int32_t> history;
  std::span<const int32_t> h = s.tokens;
  if (!s.sampling.ArgmaxSuffices() && !accepted.empty()) {
    history = s.tokens;
    history.insert(history.end(), accepted.begin(), accepted.end());
    h = history;
  }
  const int64_t t = static_cast<int64_t>(s.tokens.size() + accepted.size()) - s.prompt_len;
  return CoupledSample(logits, s.sampling, s.SamplingContextFor(h), PtpUniform(s.sampling.seed, t));
}

void PtpPolicy::DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) {
  PtpState& st = PolicyStateOf<PtpState>(s);
  // Defensive: the call must end at the newest token plus the proposals it
  // carried.
  const int32_t first_teacher = r.first_pos + r.verify_rows() - r.output_rows;
  if (first_teacher + 1 != static_cast<int32_t>(s.tokens.size()) ||
      r.output_rows != static_cast<int32_t>(st.proposals.size()) + 1) {
    return;
  }
  const std::vector<int32_t> proposals = std::move(st.proposals);
  st.proposals.clear();
  const int m = static_cast<int>(proposals.size());
  const int vocab = host_.config().vocab_size;
  // Row i's teacher token: the proposals before it were accepted.
  auto teacher = [&](int i) {
    if (!out.greedy.empty()) return out.greedy[i];
    return TeacherToken(s, std::span(proposals).first(i),
                        out.logits.subspan(int64_t{i} * vocab, vocab));
  };
  // Accept the longest prefix of proposals the teacher agrees with, then the
  // teacher's own token (docs/ptp.md "One call").
  int a = 0;
  int32_t c = teacher(0);
  while (a < m && proposals[a] == c) c = teacher(++a);

  RecordVerifiedCall(s, m, a);  // one call
  const int aux = static_cast<int>(out.aux.size());
  // The auxiliary rows assumed every proposal was right: their proposals
  // hold only if so, and only if the first one foresaw the teacher's token.
  const bool checked = a == m && aux > 0 && out.aux[0] == c;
  RecordLocked(m, a, aux, checked);
  if (aux > 0) st.tokens_since_aux = 0;
  st.tokens_since_aux += a + 1;
  s.stats.cycles += host_.n_stages();  // a call crosses the whole pipeline once

  // The stages keep positions up to the call's last row; the next call
  // starts at the newest committed token and overwrites the rest there
  // (implicit rollback: docs/ptp.md, "Truncate the KV cache to n+a").
  // Token i was decided by teacher row i; the rows ship as logits whenever
  // the request wants logprobs (an argmax alone otherwise).
  auto row = [&](int i) {
    return out.logits.empty() ? out.logits : out.logits.subspan(int64_t{i} * vocab, vocab);
  };
  for (int i = 0; i < a && !s.finished(); ++i) host_.EmitTokenLocked(s, proposals[i], row(i));
  if (!s.finished()) host_.EmitTokenLocked(s, c, row(a));
  if (s.finished()) return;
  s.cached = static_cast<int32_t>(s.tokens.size()) - 1;
  if (checked) st.proposals.assign(out.aux.begin() + 1, out.aux.end());
  // The next call carries the proposals (rows the rule counts as shared)
  // and expects the accepted ones; its auxiliary rows count only if all are.
  CallShare share = out.share;
  double live = 1.0, expected = 0.0;
  for (size_t j = 0; j < st.proposals.size(); ++j) {
    live *= length_rule_.Acceptance(kAuxRows, static_cast<int>(j) + 2);
    expected += live;
  }
  share.other_rows += static_cast<int>(st.proposals.size());
  share.other_tokens += expected;
  st.aux = AuxRowsWorthSending(st, share, live);
}

void PtpPolicy::RecordLocked(int verified, int accepted, int aux, bool checked) {
  // Position 1 of the rule's chain is the first auxiliary row's check,
  // positions 2... the proposals it let through.
  if (verified > 0) length_rule_.Record(kAuxRows, 1 + verified, 1 + accepted);
  if (accepted == verified && aux > 0) {
    if (!checked) length_rule_.Record(kAuxRows, aux, 0);
    else if (aux == 1) length_rule_.Record(kAuxRows, 1, 1);
  }
}

int PtpPolicy::AuxRowsWorthSending(const PtpState& st, const CallShare& share,
                                   double live) const {
  switch (rules_.when) {
    case DraftGate::kNever: return 0;
    case DraftGate::kAlways: return n_aux_;
    case DraftGate::kAuto: break;
  }
  const int k = length_rule_.Choose(
      kAuxRows, n_aux_, [this](int rows) { return host_.CallCost(rows); }, share,
      /*checked=*/1, live);
  // The probe is the smallest call that teaches anything: the check row and
  // one proposal (positions beyond what the rule has judged take the
  // estimate before them, so good proposals lengthen the next calls).
  if (k == 0 && st.tokens_since_aux >= rules_.probe_interval) return std::min(2, n_aux_);
  return k;
}

std::unique_ptr<DecodingPolicy> MakePtpPolicy(const PolicyResources& r) {
  const PtpOptions& o = r.options.Of<PtpOptions>();
  if (o.head.empty()) return nullptr;
  std::shared_ptr<const DraftHead> head = LoadDraftHead(o.head, r.model->config());
  // PtpAdapter refuses other methods with a message naming the directory.
  const uint64_t fingerprint = PtpAdapter(head).fingerprint();
  const int n_aux = o.n_aux > 0 ? o.n_aux : head->config().ptp_n_aux;
  if (n_aux < 1) throw std::invalid_argument(o.head + ": ptp.n_aux must be at least 1");
  return std::make_unique<PtpPolicy>(r.host, o.head, fingerprint, n_aux, r.draft_rules());
}

constexpr PolicyFlag kFlags[] = {
    {"ptp-head", "DIR",
     "enable DECODING_POLICY_PTP with this adapter (every stage\n"
     "and the scheduler load it; CPU stages)",
     "",
     StoreText<PtpOptions, &PtpOptions::head>,
     /*stages_too=*/true},
    {"ptp-n-aux", "N", "PTP auxiliary rows per call", "0: the adapter's",
     [](const std::string& v, SpecOptions& o) {
       return ParseNumber("ptp-n-aux", v, &o.Of<PtpOptions>().n_aux);
     }},
};

}  // namespace

const PolicyDeclaration& PtpDeclaration() {
  static const PolicyDeclaration d{v1::DECODING_POLICY_PTP, kFlags,
                                   "the scheduler has no --ptp-head", MakePtpPolicy};
  return d;
}

}  // namespace specline::scheduler
