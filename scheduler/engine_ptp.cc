// Engine: PTP, parallel token prediction (docs/ptp.md). A PTP sequence has
// at most one call in the pipeline: the newest token and the previous
// call's proposals as token rows (the teacher verifies them), then N
// auxiliary rows whose inputs are the u's of the next indices (the stages
// embed them and apply the adapter's LoRA; their argmax are the next
// proposals). Every token is the coupled sample of the teacher at its own
// counter-based u, so the output is plain decoding at those u's whatever
// the proposals: the policy is lossless by construction.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/runtime/ptp_adapter.h"
#include "model/runtime/ptp_coupling.h"
#include "scheduler/engine.h"

namespace specline::scheduler {

void Engine::LoadPtpAdapter() {
  const SpecOptions& o = options_.spec;
  std::shared_ptr<const DraftHead> head = LoadDraftHead(o.ptp_head, config());
  // PtpAdapter refuses other methods with a message naming the directory.
  ptp_fingerprint_ = PtpAdapter(head).fingerprint();
  ptp_n_aux_ = o.ptp_n_aux > 0 ? o.ptp_n_aux : head->spec().ptp_n_aux;
  if (ptp_n_aux_ < 1) throw std::invalid_argument(o.ptp_head + ": ptp.n_aux must be at least 1");
  ptp_head_ = std::move(head);
}

absl::Status Engine::PtpAvailableLocked() const {
  if (!ptp_head_) {
    return absl::FailedPreconditionError(
        "policy PTP is not available on this deployment (the scheduler has no --ptp-head)");
  }
  if (!ptp_unavailable_.empty()) return absl::FailedPreconditionError(ptp_unavailable_);
  return absl::OkStatus();
}

int32_t Engine::PtpTeacherToken(const Sequence& s, std::span<const int32_t> accepted,
                                std::span<const float> logits) const {
  // The history a penalty sees: the committed tokens, then the proposals
  // accepted before this one (committed too once the call is decided).
  std::vector<int32_t> history;
  std::span<const int32_t> h = s.tokens;
  if (s.sampling.repetition_penalty != 1.0f && !accepted.empty()) {
    history = s.tokens;
    history.insert(history.end(), accepted.begin(), accepted.end());
    h = history;
  }
  const int64_t t = static_cast<int64_t>(s.tokens.size() + accepted.size()) - s.prompt_len;
  return CoupledSample(logits, s.sampling, h, PtpUniform(s.sampling.seed, t));
}

void Engine::DecidePtpCallLocked(Sequence& s, std::span<const int32_t> verify_greedy,
                                 std::span<const float> verify_logits,
                                 std::span<const int32_t> aux) {
  const std::vector<int32_t> proposals = std::move(s.ptp.proposals);
  s.ptp.proposals.clear();
  const int m = static_cast<int>(proposals.size());
  const int vocab = config().vocab_size;
  // Row i's teacher token: the proposals before it were accepted.
  auto teacher = [&](int i) {
    if (!verify_greedy.empty()) return verify_greedy[i];
    return PtpTeacherToken(s, std::span(proposals).first(i),
                           verify_logits.subspan(int64_t{i} * vocab, vocab));
  };
  // Accept the longest prefix of proposals the teacher agrees with, then the
  // teacher's own token (docs/ptp.md "One call").
  int a = 0;
  int32_t c = teacher(0);
  while (a < m && proposals[a] == c) c = teacher(++a);

  SpecState& sp = s.spec;
  SchedulerMetrics::Spec& metrics = SpecMetrics(s);
  ++sp.stats.drafts;  // one call
  metrics.drafts->Increment();
  sp.stats.draft_tokens += m;
  metrics.draft_tokens->Increment(m);
  sp.stats.accepted_tokens += a;
  metrics.accepted_tokens->Increment(a);
  if (static_cast<int>(sp.stats.accepted_per_pos.size()) < a) sp.stats.accepted_per_pos.resize(a);
  for (int i = 0; i < a; ++i) {
    ++sp.stats.accepted_per_pos[i];
    metrics.AcceptedAtPosition(i)->Increment();
  }
  if (a < m) {
    ++sp.stats.rejected_tokens;
    metrics.flushes->Increment();
    sp.stats.discarded_tokens += m - a - 1;
    metrics.discarded_tokens->Increment(m - a - 1);
  }
  sp.stats.cycles += n_stages();  // a call crosses the whole pipeline once

  // The stages keep positions up to the call's last row; the next call
  // starts at the newest committed token and overwrites the rest there
  // (implicit rollback: docs/ptp.md, "Truncate the KV cache to n+a").
  for (int i = 0; i < a && !s.finished(); ++i) EmitTokenLocked(s, proposals[i]);
  if (!s.finished()) EmitTokenLocked(s, c);
  if (s.finished()) return;
  s.cached = static_cast<int32_t>(s.tokens.size()) - 1;
  // The auxiliary rows assumed every proposal was right: their proposals
  // hold only if so, and only if the first one foresaw the teacher's token.
  if (a == m && !aux.empty() && aux[0] == c) {
    s.ptp.proposals.assign(aux.begin() + 1, aux.end());
  }
}

}  // namespace specline::scheduler
