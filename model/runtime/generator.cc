#include "model/runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "model/runtime/ptp_coupling.h"

namespace specline {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Releases the sequence's KV on every exit path.
struct SequenceGuard {
  LocalPipeline& model;
  uint64_t seq;
  ~SequenceGuard() { model.Release(seq); }
};

}  // namespace

absl::StatusOr<GenerationResult> Generate(LocalPipeline& model, uint64_t seq,
                                          std::span<const int32_t> prompt,
                                          const GenerationOptions& options,
                                          const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (std::string err = options.sampling.Validate(); !err.empty()) {
    return absl::InvalidArgumentError(err);
  }
  if (options.max_tokens < 0 || options.prefill_chunk < 1) {
    return absl::InvalidArgumentError("max_tokens must be >= 0 and prefill_chunk >= 1");
  }
  const int max_len = model.config().max_seq_len;
  if (static_cast<int>(prompt.size()) >= max_len) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(),
                                                   " tokens does not fit the context of ", max_len));
  }
  SequenceGuard guard{model, seq};
  GenerationResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  Rng rng(options.sampling.seed);
  SliceOutput out;
  std::vector<SlotRef> slots;
  const auto t0 = std::chrono::steady_clock::now();

  // Prefill in chunks; only the last position's logits are needed.
  int32_t pos = 0;
  while (pos < static_cast<int32_t>(prompt.size())) {
    const int32_t n = std::min<int32_t>(options.prefill_chunk, prompt.size() - pos);
    slots.clear();
    for (int32_t i = 0; i < n; ++i) slots.push_back({seq, pos + i});
    if (absl::Status st = model.Forward(slots, prompt.subspan(pos, n), {}, &out); !st.ok()) {
      return st;
    }
    pos += n;
  }
  const int dim = model.config().dim;
  std::vector<float> logits(model.head().vocab_size());
  auto step_logits = [&] {
    model.head().Logits(out.hidden.data() + (out.hidden.size() / dim - 1) * dim, 1, logits.data());
  };
  step_logits();

  auto t_decode = std::chrono::steady_clock::now();
  result.finish_reason = "length";
  for (int i = 0; i < options.max_tokens; ++i) {
    const SamplingContext ctx{history, static_cast<int32_t>(prompt.size()), {}};
    const int32_t token =
        options.coupled
            ? CoupledSample(logits, options.sampling, ctx, PtpUniform(options.sampling.seed, i))
            : Sample(logits, options.sampling, ctx, rng);
    if (i == 0) {
      result.prefill_seconds = SecondsSince(t0);
      t_decode = std::chrono::steady_clock::now();
    }
    result.tokens.push_back(token);
    history.push_back(token);
    if (on_token && !on_token(token)) {
      result.finish_reason = "abort";
      break;
    }
    if (!options.ignore_eos && std::ranges::find(options.stop_ids, token) != options.stop_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    if (i + 1 == options.max_tokens) break;
    if (pos >= max_len) break;  // context full: finish with "length"
    const SlotRef slot{seq, pos++};
    if (absl::Status st = model.Forward({&slot, 1}, {&token, 1}, {}, &out); !st.ok()) return st;
    step_logits();
  }
  result.decode_seconds = result.tokens.size() > 1 ? SecondsSince(t_decode) : 0.0;
  return result;
}

}  // namespace specline
