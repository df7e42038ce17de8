#include "scheduler/policies/pipo.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "model/drafters/pipo_model.h"
#include "model/runtime/sampler.h"
#include "scheduler/policies/stage_check.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

// The pair stream (docs/pipo.md "The pair stream"): positions on the
// stages and in the MTP layer are pair indices. Prepare makes the prompt's
// part once per request; each attempt starts from a copy of it.
struct PipoState : PolicyState, PreparedRequest {
  float tau = 0;                // keep t2 when the confidence is >= tau
  std::vector<int32_t> stream;  // the padded prompt, then (t1, t2 or PAD) per step
  int32_t prompt_pairs = 0;
  // Compressor rows [pairs sent, stream.size() / 2) * dim: what the driver
  // sends to stage 0 instead of tokens.
  std::vector<float> z;
  int32_t pairs() const { return static_cast<int32_t>(stream.size() / 2); }
};

class PipoPolicy : public DecodingPolicy {
 public:
  PipoPolicy(PolicyHost& host, std::string head_dir, std::unique_ptr<PipoModel> model,
             uint64_t fingerprint, float tau)
      : DecodingPolicy(host), head_dir_(std::move(head_dir)), model_(std::move(model)),
        fingerprint_(fingerprint), tau_(tau) {}

  v1::DecodingPolicy mode() const override { return v1::DECODING_POLICY_PIPO; }

  // Pads and compresses the prompt, once per request.
  absl::StatusOr<std::shared_ptr<const PreparedRequest>> Prepare(
      const RequestOptions& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<std::vector<int32_t>> padded = model_->PadPrompt(r.prompt);
    if (!padded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: ", padded.status().message()));
    }
    auto st = std::make_shared<PipoState>();
    st->tau = r.pipo_tau >= 0 ? r.pipo_tau : tau_;
    st->stream = *std::move(padded);
    st->prompt_pairs = st->pairs();
    st->z.resize(static_cast<size_t>(st->prompt_pairs) * model_->dim());
    model_->CompressPairs(st->stream, st->z.data());
    return std::shared_ptr<const PreparedRequest>(std::move(st));
  }
  // A PIPO request holds one position per pair.
  int32_t PromptPositions(const RequestOptions& /*r*/,
                          const PreparedRequest* prepared) const override {
    return PreparedAs<PipoState>(prepared).prompt_pairs;
  }
  absl::Status AvailableLocked(const RequestOptions& /*r*/) const override {
    if (!unavailable_.empty()) return absl::FailedPreconditionError(unavailable_);
    return absl::OkStatus();
  }
  void OnPipelineUpLocked(const std::vector<internal::StageInfo>& infos) override {
    StageModel backbone = FindStageWeightSet(host_, infos, fingerprint_, "PIPO", head_dir_);
    weight_set_id_ = backbone.id;
    unavailable_ = std::move(backbone.unavailable);
  }
  void Attach(Sequence& s, const PreparedRequest* prepared) override {
    DecodingPolicy::Attach(s, nullptr);
    s.policy_state = std::make_unique<PipoState>(PreparedAs<PipoState>(prepared));
  }
  void RetireLocked(Sequence& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    model_->Release(s.id);
  }
  int32_t ChainEnd(const Sequence& s) const override {
    return PolicyStateOf<PipoState>(s).pairs();
  }
  bool LimitedByContext() const override { return false; }  // positions are pairs

  // Pairs go as compressor rows (z of [cached, ...)), sent once.
  void WriteRows(Sequence& s, const SlotRun& r, BatchRows& out) override {
    std::vector<float>& z = PolicyStateOf<PipoState>(s).z;
    const size_t n = static_cast<size_t>(r.count) * host_.config().dim;
    for (int32_t i = 0; i < r.count; ++i) {
      out.Add(s.id, r.first_pos + i, s.epoch, 0, {.weight_set = weight_set_id_});
    }
    out.AppendInputs(std::span(z).first(n));
    z.erase(z.begin(), z.begin() + n);
  }
  // Prompt tokens, not positions: a position holds a pair (the padded
  // prompt's last may end in PAD).
  int32_t PromptTokens(const Sequence& s, const SlotRun& r) const override {
    return std::min(2 * r.count, s.prompt_len - 2 * r.first_pos);
  }
  // The MTP layer reads every pair's h_b, prompt pairs included.
  bool ReadsHidden() const override { return true; }
  // So a cached prompt prefix cannot be skipped: the MTP layer's own cache
  // would lack those pairs.
  std::optional<RowModel> PromptKvModel(const Sequence& /*s*/) const override {
    return std::nullopt;
  }
  WantedRows Wanted(const SlotRun& r) const override { return {r.first_pos, r.count, 0}; }

  void DecideLocked(Sequence& s, const SlotRun& r, const RunOutput& out) override;

 private:
  std::string head_dir_;
  // The heads, guarded by mu_ (taken after the engine lock when both are
  // held, and released before anything that may end the sequence:
  // RetireLocked takes it).
  std::mutex mu_;
  std::unique_ptr<PipoModel> model_;
  uint64_t fingerprint_;
  uint32_t weight_set_id_ = 0;  // the stages' id of the backbone (OnPipelineUpLocked)
  float tau_;
  std::string unavailable_ = "the pipeline is not up";
};

// A run came back with its pairs' h_b (the last stage's output). Fills the
// MTP layer for prompt pairs and, when the run ends at the newest pair,
// takes a step: t1, the MTP and confidence heads, t2 or PAD, the next pair.
void PipoPolicy::DecideLocked(Sequence& s, const SlotRun& run, const RunOutput& out) {
  PipoState& p = PolicyStateOf<PipoState>(s);
  if (run.first_pos + run.count > p.pairs()) return;
  const std::span<const float> h_b = out.hidden;
  const int dim = host_.config().dim;
  const int32_t first = run.first_pos;
  const int32_t n = run.count;
  // The run ends at the newest pair: its last row takes a step; the other
  // rows (prompt pairs followed by a known pair) only fill the MTP cache
  // with their following pair's first token (docs/pipo.md "Prefill" 2).
  const bool step = run.needs_logits && first + n == p.pairs();
  std::vector<int32_t> token1(n);
  for (int32_t k = 0; k < n - (step ? 1 : 0); ++k) token1[k] = p.stream[2 * (first + k) + 2];

  std::vector<float> logits;
  std::vector<float> row1;  // t1's row, for its logprobs
  std::vector<float> confidence(n);
  absl::Status st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    logits.resize(model_->vocab_size());
    if (step) {
      model_->Logits1(h_b.data() + int64_t{n - 1} * dim, 1, logits.data());
      token1[n - 1] = Sample(logits, s.sampling, s.SamplingContextFor(s.tokens), s.rng);
      // Mtp overwrites the row with the second token's: keep the first's.
      if (s.wants_logprobs()) row1 = logits;
    }
    st = model_->Mtp(s.id, first, token1, h_b, step ? logits.data() : nullptr, confidence.data());
  }
  if (!st.ok()) {
    spdlog::error("request {} (seq {}): PIPO heads failed: {}", s.request_id, s.id, st.ToString());
    host_.FinishLocked(s, FinishReason::kError, st);
    return;
  }
  if (!step) return;
  const int32_t t1 = token1[n - 1];
  // The threshold is compared in float, as the reference does.
  const bool accept = confidence[n - 1] >= p.tau;
  int32_t t2 = model_->pad_id();
  if (accept) {
    std::vector<int32_t> history = s.tokens;
    history.push_back(t1);
    t2 = Sample(logits, s.sampling, s.SamplingContextFor(history), s.rng);  // logits now hold l2
  }

  SpecStats& stats = s.stats;
  SchedulerMetrics::Spec& m = metrics();
  ++stats.drafts;  // one backbone pass
  m.drafts->Increment();
  ++stats.draft_tokens;  // its second-token candidate
  m.draft_tokens->Increment();
  if (accept) {
    ++stats.accepted_tokens;
    m.accepted_tokens->Increment();
    if (stats.accepted_per_pos.empty()) stats.accepted_per_pos.resize(1);
    ++stats.accepted_per_pos[0];
    m.AcceptedAtPosition(0)->Increment();
  } else {
    RecordDiscarded(s, 1);  // PAD fills the pair: nothing to flush
  }
  stats.cycles += host_.n_stages();

  // PIPO's rows are its own model's (it has no separate target): t2's is
  // the MTP head's, the distribution t2 was drawn from.
  host_.EmitTokenLocked(s, t1, row1);
  if (accept && !s.finished()) host_.EmitTokenLocked(s, t2, logits);
  if (s.finished()) return;
  p.stream.insert(p.stream.end(), {t1, t2});
  if (p.pairs() >= host_.config().max_seq_len) {
    host_.FinishLocked(s, FinishReason::kLength, absl::OkStatus());  // no position left for the next pair
    return;
  }
  p.z.resize(dim);
  std::lock_guard<std::mutex> lock(mu_);
  model_->Compress(t1, t2, p.z.data());
}

std::unique_ptr<DecodingPolicy> MakePipoPolicy(const PolicyResources& r) {
  const PipoOptions& o = r.options.Of<PipoOptions>();
  if (o.head.empty()) return nullptr;
  std::shared_ptr<const DraftHead> head = LoadDraftHead(o.head, r.model->config());
  if (head->config().method != DraftMethod::kPipo) {
    throw std::invalid_argument(o.head + ": a " + DraftMethodName(head->config().method) +
                                " head is not a PIPO head");
  }
  const uint64_t fingerprint = head->Fingerprint();
  PipoModelOptions mo;
  mo.kv_block_size = r.kv_block_size;
  mo.kv_capacity_tokens = r.options.draft_kv_capacity_tokens;
  auto model = std::make_unique<PipoModel>(std::move(head), r.pool, mo);
  const auto tau = static_cast<float>(o.tau >= 0 ? o.tau : model->tau_default());
  return std::make_unique<PipoPolicy>(r.host, o.head, std::move(model), fingerprint, tau);
}

constexpr PolicyFlag kFlags[] = {
    {"pipo-head", "DIR",
     "enable DECODING_POLICY_PIPO (not lossless) with this head:\n"
     "the stages run its backbone, the scheduler its heads",
     "",
     StoreText<PipoOptions, &PipoOptions::head>,
     /*stages_too=*/true},
    {"pipo-tau", "X", "PIPO's default confidence threshold", "< 0: the head's",
     [](const std::string& v, SpecOptions& o) {
       return ParseNumber("pipo-tau", v, &o.Of<PipoOptions>().tau);
     }},
};

}  // namespace

const PolicyDeclaration& PipoDeclaration() {
  static const PolicyDeclaration d{v1::DECODING_POLICY_PIPO, kFlags,
                                   "the scheduler has no --pipo-head", MakePipoPolicy};
  return d;
}

}  // namespace specline::scheduler
