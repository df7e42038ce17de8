#include "tests/pipo_reference.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/runtime/sampler.h"
#include "model/runtime/stage_slice.h"

namespace specline {
namespace {

// The backbone's own sequence id: the slice below belongs to one call.
constexpr uint64_t kBackboneSeq = 0;

absl::Status CheckOptions(const PipoGenerateOptions& o, const SamplingParams& sampling) {
  if (o.max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens ", o.max_tokens, " is negative"));
  }
  if (o.tau.has_value() && std::isnan(*o.tau)) return absl::InvalidArgumentError("tau is NaN");
  if (std::string err = sampling.Validate(); !err.empty()) return absl::InvalidArgumentError(err);
  return absl::OkStatus();
}

SamplingParams SamplingOf(const PipoGenerateOptions& o) {
  SamplingParams p;
  p.temperature = o.temperature;
  p.seed = o.seed;
  return p;
}

// The whole fine-tuned backbone as one slice fed with z rows; room for the
// prompt's pairs plus one pair per step (a step emits at least one token).
std::unique_ptr<StageSlice> BackboneSlice(const PipoModel& model, int64_t prompt_pairs,
                                          int max_tokens) {
  SliceOptions so;
  so.hidden_input = true;
  so.kv_capacity_tokens = static_cast<int>(prompt_pairs + max_tokens + 1);
  const ModelSource& bb = *model.backbone();
  return std::make_unique<StageSlice>(bb, 0, bb.config().n_layers, so, model.pool());
}

// Runs z rows at pair positions first.. of the slice's sequence into *h.
absl::Status RunBackbone(StageSlice& slice, int32_t first, const std::vector<float>& z, int dim,
                         std::vector<float>* h) {
  const int64_t n = static_cast<int64_t>(z.size()) / dim;
  std::vector<SlotRef> slots(n);
  for (int64_t k = 0; k < n; ++k) slots[k] = SlotRef{kBackboneSeq, first + static_cast<int32_t>(k)};
  SliceInput in;
  in.slots = slots;
  in.hidden = z;
  SliceOutput out;
  if (absl::Status st = slice.Forward(in, {}, &out); !st.ok()) return st;
  *h = std::move(out.hidden);
  return absl::OkStatus();
}

bool IsStop(const PipoGenerateOptions& o, int32_t t) {
  return std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end();
}

// The options checked, then the padded prompt (both decoders start so).
absl::StatusOr<std::vector<int32_t>> CheckedPaddedPrompt(const PipoModel& model,
                                                         std::span<const int32_t> prompt,
                                                         const PipoGenerateOptions& options,
                                                         const SamplingParams& sampling) {
  if (absl::Status st = CheckOptions(options, sampling); !st.ok()) return st;
  return model.PadPrompt(prompt);
}

// Releases the sequence's MTP cache on every exit path.
struct MtpRelease {
  PipoModel& model;
  uint64_t seq;
  ~MtpRelease() { model.Release(seq); }
};

}  // namespace

absl::StatusOr<PipoGenerateResult> PipoGenerate(PipoModel& model,
                                                std::span<const int32_t> prompt,
                                                const PipoGenerateOptions& options) {
  const SamplingParams sampling = SamplingOf(options);
  absl::StatusOr<std::vector<int32_t>> padded = CheckedPaddedPrompt(model, prompt, options, sampling);
  if (!padded.ok()) return padded.status();
  // PyTorch compares the float32 confidence with the Python float tau cast
  // to float32; so does this.
  const float tau = static_cast<float>(options.tau.value_or(model.tau_default()));
  const int H = model.dim(), V = model.vocab_size();
  const int32_t pad = model.pad_id();
  const uint64_t seq = options.seq_id;

  PipoGenerateResult r;
  r.padded_prompt = *padded;
  r.stream = *padded;
  if (options.max_tokens == 0) return r;

  // Prefill 1: z of every prompt pair, the backbone over pairs 0..n-1.
  const int32_t n = static_cast<int32_t>(padded->size() / 2);
  auto slice = BackboneSlice(model, n, options.max_tokens);
  std::vector<float> z(int64_t{n} * H), h;
  model.CompressPairs(*padded, z.data());
  if (absl::Status st = RunBackbone(*slice, 0, z, H, &h); !st.ok()) return st;

  // Prefill 2: the MTP over pairs 0..n-2, token1 = the next prompt pair's
  // first token; fills its cache slots, the outputs are discarded.
  model.Release(seq);
  MtpRelease release{model, seq};
  if (n > 1) {
    std::vector<int32_t> token1(n - 1);
    for (int32_t k = 0; k + 1 < n; ++k) token1[k] = (*padded)[2 * k + 2];
    if (absl::Status st = model.Mtp(seq, 0, token1, std::span(h).first(int64_t{n - 1} * H),
                                    nullptr, nullptr);
        !st.ok()) {
      return st;
    }
  }

  // Steps: at pair position i, h_b = h (the backbone output of pair i).
  std::vector<float> h_b(h.end() - H, h.end()), l1(V), l2(V);
  Rng rng(options.seed);
  for (int32_t i = n - 1;; ++i) {
    model.Logits1(h_b.data(), 1, l1.data());
    PipoStepInfo s;
    s.pair_position = i;
    s.t1 = Sample(l1, sampling, {}, rng);
    float conf = 0.0f;
    absl::Status st = model.Mtp(seq, i, std::span(&s.t1, 1), h_b, l2.data(), &conf);
    if (!st.ok()) return st;
    s.confidence = conf;
    s.accepted = conf >= tau;
    // Greedy reports the MTP's argmax always; sampling draws only on
    // acceptance, so tau > 1 leaves the Rng stream of the backbone alone.
    if (sampling.greedy()) s.t2 = Sample(l2, sampling, {}, rng);
    else s.t2 = s.accepted ? Sample(l2, sampling, {}, rng) : pad;
    s.logits1_max = *std::max_element(l1.begin(), l1.end());
    s.logits2_max = *std::max_element(l2.begin(), l2.end());
    r.steps.push_back(s);

    const int32_t t2 = s.accepted ? s.t2 : pad;
    r.stream.push_back(s.t1);
    r.stream.push_back(t2);
    // Emit t1, then t2 when accepted (PAD is masked out of both heads, so
    // it only ever stands for a rejection), up to max_tokens or a stop id.
    auto done = [&] {
      return r.stopped || static_cast<int>(r.tokens.size()) >= options.max_tokens;
    };
    for (int32_t t : {s.t1, t2}) {
      if (t == pad || done()) continue;
      r.tokens.push_back(t);
      r.stopped = IsStop(options, t);
    }
    if (done()) break;

    // The next pair (t1, t2 or PAD) through compressor + backbone at i + 1.
    std::vector<float> zi(H);
    model.Compress(s.t1, t2, zi.data());
    if (absl::Status st = RunBackbone(*slice, i + 1, zi, H, &h_b); !st.ok()) return st;
  }
  return r;
}

absl::StatusOr<std::vector<int32_t>> BackbonePairwiseGenerate(PipoModel& model,
                                                              std::span<const int32_t> prompt,
                                                              const PipoGenerateOptions& options) {
  const SamplingParams sampling = SamplingOf(options);
  absl::StatusOr<std::vector<int32_t>> padded = CheckedPaddedPrompt(model, prompt, options, sampling);
  if (!padded.ok()) return padded.status();
  const int H = model.dim(), V = model.vocab_size();
  std::vector<int32_t> stream = *padded, out;
  auto slice = BackboneSlice(model, static_cast<int64_t>(stream.size() / 2), options.max_tokens);
  Rng rng(options.seed);
  std::vector<float> z, h, logits(V);
  while (static_cast<int>(out.size()) < options.max_tokens) {
    // No cache reuse: every step reruns all pairs from position 0 (the
    // slice's implicit rollback overwrites what an earlier step cached).
    z.resize(stream.size() / 2 * H);
    model.CompressPairs(stream, z.data());
    if (absl::Status st = RunBackbone(*slice, 0, z, H, &h); !st.ok()) return st;
    model.Logits1(h.data() + h.size() - H, 1, logits.data());
    const int32_t t = Sample(logits, sampling, {}, rng);
    out.push_back(t);
    if (IsStop(options, t)) break;
    stream.push_back(t);
    stream.push_back(model.pad_id());
  }
  return out;
}

}  // namespace specline
