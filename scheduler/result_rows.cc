#include "scheduler/result_rows.h"

namespace specline::scheduler {

ResultRows RouteResultRows(const internal::MicroBatch& batch, std::span<const SlotRun> runs,
                           int dim) {
  ResultRows out;
  const int slots = batch.seq_ids_size();
  const float* hidden = reinterpret_cast<const float*>(batch.hidden().data());
  auto take = [&](std::vector<float>& into, int row, int32_t n) {
    const int64_t first = static_cast<int64_t>(into.size()) / dim;
    into.insert(into.end(), hidden + int64_t(row) * dim, hidden + int64_t(row + n) * dim);
    return first;
  };
  int row = 0;
  for (const SlotRun& r : runs) {
    ResultRows::Run& p = out.runs.emplace_back();
    Sequence& s = *r.seq;
    const WantedRows want = s.policy->Wanted(r);
    // Rows keep the order they were sent in; a run's rows are found by
    // skipping what lies before them (runs of dropped slots are gone).
    int found = row;
    while (found < slots &&
           !(batch.seq_ids(found) == s.id && batch.positions(found) == want.first)) {
      ++found;
    }
    if (found + want.used > slots) continue;  // dropped by a stage as stale
    bool whole = true;
    for (int32_t k = 1; k < want.used; ++k) {
      whole = whole && batch.seq_ids(found + k) == s.id &&
              batch.positions(found + k) == want.first + k;
    }
    if (!whole) continue;
    row = found;
    if (s.policy->ReadsHidden()) {
      if (!s.finished()) {
        p.hidden = take(out.hidden_rows, row, want.used);
        p.n_hidden = want.used;
      }
      continue;
    }
    if (!r.needs_logits || s.finished() || r.epoch != s.epoch) continue;
    const SamplingParams& sp = s.sampling;
    // Ship the argmax alone only when the raw row's argmax is the token
    // and nobody reads the row (its logprobs included).
    const bool greedy_only = sp.ArgmaxSuffices() && !want.logits && !s.wants_logprobs() &&
                             !s.grammar;
    p.decide = want.used - want.aux;
    p.n_aux = want.aux;
    (greedy_only ? p.greedy : p.logits) =
        take(greedy_only ? out.greedy_rows : out.logit_rows, row, p.decide);
    if (want.aux > 0) p.aux = take(out.greedy_rows, row + p.decide, want.aux);
  }
  return out;
}

HeadOutputs RunHead(LogitsHead& head, const ResultRows& rows, int dim) {
  HeadOutputs out;
  const int64_t n = static_cast<int64_t>(rows.logit_rows.size()) / dim;
  out.vocab = head.vocab_size();
  out.logits.resize(n * out.vocab);
  if (n > 0) head.Logits(rows.logit_rows.data(), n, out.logits.data());
  out.greedy.resize(rows.greedy_rows.size() / dim);
  if (!out.greedy.empty()) {
    head.Argmax(rows.greedy_rows.data(), static_cast<int64_t>(out.greedy.size()),
                out.greedy.data());
  }
  return out;
}

std::optional<RunOutput> RunOutputOf(const ResultRows& rows, const HeadOutputs& head, size_t i,
                                     const SlotRun& run, int dim) {
  const ResultRows::Run& p = rows.runs[i];
  RunOutput out;
  if (p.hidden >= 0) {
    out.hidden = std::span(rows.hidden_rows).subspan(p.hidden * dim, int64_t{p.n_hidden} * dim);
    return out;
  }
  // Skipped: cancelled, or flushed while the logits were computed.
  if ((p.logits < 0 && p.greedy < 0) || run.epoch != run.seq->epoch) return std::nullopt;
  if (p.greedy >= 0) out.greedy = std::span(head.greedy).subspan(p.greedy, p.decide);
  if (p.logits >= 0) {
    out.logits =
        std::span(head.logits).subspan(p.logits * head.vocab, int64_t{p.decide} * head.vocab);
  }
  if (p.aux >= 0) out.aux = std::span(head.greedy).subspan(p.aux, p.n_aux);
  return out;
}

}  // namespace specline::scheduler
