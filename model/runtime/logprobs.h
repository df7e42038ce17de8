// Log-probabilities of emitted tokens (OpenAI's logprobs / top_logprobs).
//
// Which distribution: the log-softmax of the row after everything that
// changes the logits (ProcessLogits: logit_bias, the grammar mask, the
// repetition, presence and frequency penalties) at the request's
// temperature (1 when greedy), before top-k, top-p and min-p truncate it.
// This is vLLM's "processed_logprobs" choice: a truncated distribution
// gives -inf to most alternatives, which tells a client nothing, while the
// processed one is what the sampler's choice was made from. With
// speculation the row is always the target model's verified row at that
// position, never a drafter's (docs/openai_api.md "logprobs").
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/runtime/sampler.h"

namespace specline {

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // -inf for a token the mask forbids
  // The top_n most likely tokens, most likely first (lower id among ties);
  // tokens the mask forbids are never listed.
  std::vector<std::pair<int32_t, float>> top;
};

// `token`'s log-probability at the position `logits` (one row) decides, and
// the top_n alternatives (0 <= top_n <= kMaxTopLogprobs).
TokenLogprob ComputeLogprobs(std::span<const float> logits, const SamplingParams& params,
                             const SamplingContext& ctx, int32_t token, int top_n);

}  // namespace specline
