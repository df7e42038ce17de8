// The default hooks: plain autoregressive decoding's answers, which most
// policies share for most of a sequence's life (prompt chunks, one token
// per step).
#include "scheduler/decoding_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace specline::scheduler {

absl::Status DecodingPolicy::Validate(const RequestOptions& /*r*/) const { return absl::OkStatus(); }

absl::StatusOr<std::shared_ptr<const PreparedRequest>> DecodingPolicy::Prepare(
    const RequestOptions& /*r*/) {
  return std::shared_ptr<const PreparedRequest>();
}

int32_t DecodingPolicy::PromptPositions(const RequestOptions& r,
                                        const PreparedRequest* /*prepared*/) const {
  return static_cast<int32_t>(r.prompt.size());
}

void DecodingPolicy::Attach(Sequence& s, const PreparedRequest* /*prepared*/) {
  s.policy = this;
  s.policy_state.reset();
}

int32_t DecodingPolicy::ChainEnd(const Sequence& s) const {
  return static_cast<int32_t>(s.tokens.size());
}

// A plain decoder has exactly one pending token; sending all of them keeps
// the rule right if a policy ever leaves more.
SlotRun DecodingPolicy::PlanDecode(const std::shared_ptr<Sequence>& s, int32_t budget) const {
  const int32_t n = std::min<int32_t>(s->pending(), budget);
  return {s, s->cached, n, n == s->pending(), s->epoch};
}

SlotRun DecodingPolicy::PlanPrefill(const std::shared_ptr<Sequence>& s, int32_t chunk,
                                    int32_t budget) const {
  const int32_t n = std::min({s->pending(), chunk, budget});
  return {s, s->cached, n, n == s->pending(), s->epoch};
}

void DecodingPolicy::WriteRows(Sequence& s, const SlotRun& r, BatchRows& out) {
  for (int32_t i = 0; i < r.count; ++i) {
    const int32_t pos = r.first_pos + i;
    out.Add(s.id, pos, s.epoch, s.tokens[pos]);
  }
}

int32_t DecodingPolicy::PromptTokens(const Sequence& /*s*/, const SlotRun& r) const {
  return r.count - r.aux;
}

void DecodingPolicy::RecordVerifiedCall(Sequence& s, int m, int a) {
  SpecStats& stats = s.stats;
  SchedulerMetrics::Spec& met = metrics();
  ++stats.drafts;
  met.drafts->Increment();
  stats.draft_tokens += m;
  met.draft_tokens->Increment(m);
  stats.accepted_tokens += a;
  met.accepted_tokens->Increment(a);
  if (static_cast<int>(stats.accepted_per_pos.size()) < a) stats.accepted_per_pos.resize(a);
  for (int i = 0; i < a; ++i) {
    ++stats.accepted_per_pos[i];
    met.AcceptedAtPosition(i)->Increment();
  }
  if (a < m) {
    ++stats.rejected_tokens;
    met.flushes->Increment();
    RecordDiscarded(s, m - a - 1);
  }
}

void DecodingPolicy::RecordDiscarded(Sequence& s, int64_t n) {
  if (n <= 0) return;
  s.stats.discarded_tokens += n;
  metrics().discarded_tokens->Increment(static_cast<double>(n));
}

void DecodingPolicy::RecordDraftSource(Sequence& s, const std::string& source, int64_t tokens) {
  if (tokens <= 0) return;
  ++s.stats.drafts_by_source[source];
  s.stats.draft_tokens_by_source[source] += tokens;
  SchedulerMetrics::Spec& met = metrics();
  met.DraftsFrom(source)->Increment();
  met.DraftTokensFrom(source)->Increment(static_cast<double>(tokens));
}

WantedRows DecodingPolicy::Wanted(const SlotRun& r) const {
  return {r.first_pos + r.verify_rows() - r.output_rows, r.output_rows + r.aux, r.aux};
}

}  // namespace specline::scheduler
