// Engine: PIPO, pair-in pair-out (docs/pipo.md). Not lossless: a PIPO
// request decodes with a fine-tuned backbone that reads one compressed
// pair of tokens per position and emits the backbone's token plus, when the
// confidence head is sure enough, the MTP head's. The stages run the
// backbone's layers on the pairs' compressor rows (specline-stage
// --pipo-head); the scheduler runs everything else: the compressor, the
// first token's LM head, the MTP layer (its own KV cache), the confidence
// head and the sampling. A sequence has at most one pair in flight (the
// next pair is its own output); other sequences keep the pipeline busy.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/runtime/sampler.h"
#include "scheduler/engine.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

void Engine::LoadPipoHead() {
  const SpecOptions& o = options_.spec;
  std::shared_ptr<const DraftHead> head = LoadDraftHead(o.pipo_head, config());
  if (head->spec().method != DraftMethod::kPipo) {
    throw std::invalid_argument(o.pipo_head + ": a " + DraftMethodName(head->spec().method) +
                                " head is not a PIPO head");
  }
  pipo_fingerprint_ = head->Fingerprint();
  PipoModelOptions mo;
  mo.kv_block_size = options_.kv_block_size;
  mo.kv_capacity_tokens = o.draft_kv_capacity_tokens;
  pipo_ = std::make_unique<PipoModel>(std::move(head), pool_, mo);
  pipo_tau_ = static_cast<float>(o.pipo_tau >= 0 ? o.pipo_tau : pipo_->tau_default());
}

absl::Status Engine::PreparePipo(const RequestSpec& spec, PipoState* out) {
  std::lock_guard<std::mutex> lock(pipo_mu_);
  absl::StatusOr<std::vector<int32_t>> padded = pipo_->PadPrompt(spec.prompt);
  if (!padded.ok()) return absl::InvalidArgumentError(absl::StrCat("prompt: ", padded.status().message()));
  out->active = true;
  out->tau = spec.pipo_tau >= 0 ? spec.pipo_tau : pipo_tau_;
  out->stream = *std::move(padded);
  out->prompt_pairs = out->pairs();
  out->z.resize(static_cast<size_t>(out->prompt_pairs) * pipo_->dim());
  pipo_->CompressPairs(out->stream, out->z.data());
  return absl::OkStatus();
}

void Engine::DecidePipoLocked(Sequence& s, const SlotRun& run, std::span<const float> h_b) {
  PipoState& p = s.pipo;
  const int dim = config().dim;
  const int32_t first = run.first_pos;
  const int32_t n = run.count;
  // The run ends at the newest pair: its last row takes a step; the other
  // rows (prompt pairs followed by a known pair) only fill the MTP cache
  // with their following pair's first token (docs/pipo.md "Prefill" 2).
  const bool step = run.needs_logits && first + n == p.pairs();
  std::vector<int32_t> token1(n);
  for (int32_t k = 0; k < n - (step ? 1 : 0); ++k) token1[k] = p.stream[2 * (first + k) + 2];

  // The heads run under pipo_mu_, released before anything that may end
  // the sequence (FinishLocked releases its MTP cache, taking pipo_mu_).
  std::vector<float> logits;
  std::vector<float> confidence(n);
  absl::Status st;
  {
    std::lock_guard<std::mutex> lock(pipo_mu_);
    logits.resize(pipo_->vocab_size());
    if (step) {
      pipo_->Logits1(h_b.data() + int64_t{n - 1} * dim, 1, logits.data());
      token1[n - 1] = Sample(logits, s.sampling, s.tokens, s.rng);
    }
    st = pipo_->Mtp(s.id, first, token1, h_b, step ? logits.data() : nullptr, confidence.data());
  }
  if (!st.ok()) {
    spdlog::error("request {} (seq {}): PIPO heads failed: {}", s.request_id, s.id, st.ToString());
    FinishLocked(s, FinishReason::kError, st);
    return;
  }
  if (!step) return;
  const int32_t t1 = token1[n - 1];
  // The threshold is compared in float, as the reference does.
  const bool accept = confidence[n - 1] >= p.tau;
  int32_t t2 = pipo_->pad_id();
  if (accept) {
    std::vector<int32_t> history = s.tokens;
    history.push_back(t1);
    t2 = Sample(logits, s.sampling, history, s.rng);  // logits now hold l2
  }

  SpecState& sp = s.spec;
  SchedulerMetrics::Spec& metrics = SpecMetrics(s);
  ++sp.stats.drafts;  // one backbone pass
  metrics.drafts->Increment();
  ++sp.stats.draft_tokens;  // its second-token candidate
  metrics.draft_tokens->Increment();
  if (accept) {
    ++sp.stats.accepted_tokens;
    metrics.accepted_tokens->Increment();
    if (sp.stats.accepted_per_pos.empty()) sp.stats.accepted_per_pos.resize(1);
    ++sp.stats.accepted_per_pos[0];
    metrics.AcceptedAtPosition(0)->Increment();
  } else {
    ++sp.stats.discarded_tokens;  // PAD fills the pair: nothing to flush
    metrics.discarded_tokens->Increment();
  }
  sp.stats.cycles += n_stages();

  EmitTokenLocked(s, t1);
  if (accept && !s.finished()) EmitTokenLocked(s, t2);
  if (s.finished()) return;
  p.stream.insert(p.stream.end(), {t1, t2});
  if (p.pairs() >= config().max_seq_len) {
    FinishLocked(s, FinishReason::kLength);  // no position left for the next pair
    return;
  }
  p.z.resize(dim);
  std::lock_guard<std::mutex> lock(pipo_mu_);
  pipo_->Compress(t1, t2, p.z.data());
}

}  // namespace specline::scheduler
