// Token sampling: logit bias, a grammar's token mask, the repetition,
// presence and frequency penalties, temperature, top-k, top-p and min-p
// warping into an explicit distribution, and deterministic draws from it.
// The distribution is a first-class value because speculative verification
// (rejection sampling, PTP's coupled sampling) needs p and q themselves, not
// just a sampled token.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace specline {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; HF/CTRL style
  // OpenAI's penalties, in [-2, 2]; 0 = off (ProcessLogits says how).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]), ascending ids,
  // each id once; at most kMaxLogitBias entries.
  std::vector<std::pair<int32_t, float>> logit_bias = {};
  uint64_t seed = 0;

  static constexpr int kMaxLogitBias = 300;  // OpenAI's limit

  bool greedy() const { return temperature <= 0.0f; }
  // Nothing alters the logits: the argmax of the raw row is the token (a
  // grammar mask is the caller's to check, it is not a sampling parameter).
  bool ArgmaxSuffices() const {
    return greedy() && repetition_penalty == 1.0f && presence_penalty == 0.0f &&
           frequency_penalty == 0.0f && logit_bias.empty();
  }
  // "" when valid, else which field is wrong and why. Token ids are checked
  // against the vocabulary when vocab_size > 0.
  std::string Validate(int32_t vocab_size = 0) const;
};

// What a row's processing depends on besides the parameters.
struct SamplingContext {
  // The sequence so far: the prompt, then every generated (or accepted
  // draft) token before the position being sampled.
  std::span<const int32_t> history = {};
  // history[0, prompt_len) is the prompt: presence and frequency count only
  // what follows it.
  int32_t prompt_len = 0;
  // A grammar's token bitmask: token t is allowed when bit t % 32 of word
  // t / 32 is set. Empty = every token allowed.
  std::span<const uint32_t> allowed = {};
};

inline bool TokenAllowed(std::span<const uint32_t> allowed, int32_t token) {
  return allowed.empty() ||
         (static_cast<size_t>(token / 32) < allowed.size() && ((allowed[token / 32] >> (token % 32)) & 1u));
}

// xoshiro256** seeded through splitmix64: fast, and the same stream on every
// platform (std::uniform_real_distribution is not).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  double Uniform();  // [0, 1) with 53 random bits

 private:
  uint64_t s_[4];
};

// Tokens with non-zero probability, in vocabulary order.
struct TokenDistribution {
  std::vector<int32_t> ids;  // ascending
  std::vector<float> probs;  // same length, sums to 1

  float Prob(int32_t id) const;
  int32_t Argmax() const;  // lowest id among ties
  // The token whose vocabulary-order CDF bin holds u in [0, 1).
  int32_t InverseCdf(double u) const;
};

// In place: logits of tokens seen in `history` are divided by the penalty
// when positive and multiplied when negative (each token once).
void ApplyRepetitionPenalty(std::span<float> logits, float penalty,
                            std::span<const int32_t> history);

// In place, everything that changes the logits before temperature, in this
// order (the same on the autoregressive path, every speculative verifier,
// every drafter and PTP's coupled sampling):
//   1. logit_bias: logit[t] += bias[t];
//   2. the grammar mask: tokens not in ctx.allowed get -inf;
//   3. repetition penalty over the whole history, prompt included (HF/CTRL:
//      divide a positive logit, multiply a negative one, once per token);
//   4. presence and frequency penalties over the generated tokens only,
//      history[prompt_len, end) (OpenAI: logit[t] -= presence * (c[t] > 0)
//      + frequency * c[t], c[t] = t's count there).
// Throws std::invalid_argument when the mask allows no token of the row:
// a grammar that reaches a dead end is a bug of the grammar's caller, and
// sampling from nothing has no answer.
void ProcessLogits(std::span<float> logits, const SamplingParams& params,
                   const SamplingContext& ctx);

// The distribution the next token is drawn from. Greedy gives the one-hot
// argmax of the processed logits (lowest id among ties). Order:
// ProcessLogits, temperature, top-k, top-p, min-p, renormalise.
TokenDistribution Warp(std::span<const float> logits, const SamplingParams& params,
                       const SamplingContext& ctx);

// Draws from Warp(...) with one Uniform() of rng (none when greedy).
int32_t Sample(std::span<const float> logits, const SamplingParams& params,
               const SamplingContext& ctx, Rng& rng);

}  // namespace specline
