// Token sampling: repetition penalty, temperature, top-k, top-p and min-p
// warping into an explicit distribution, and deterministic draws from it.
// The distribution is a first-class value because speculative verification
// (rejection sampling, PTP's coupled sampling) needs p and q themselves, not
// just a sampled token.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace specline {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; HF/CTRL style
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
  // "" when valid, else which field is wrong and why.
  std::string Validate() const;
};

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

// The distribution the next token is drawn from. Greedy gives the one-hot
// argmax. Order: penalty, temperature, top-k, top-p, min-p, renormalise.
TokenDistribution Warp(std::span<const float> logits, const SamplingParams& params,
                       std::span<const int32_t> history);

// Draws from Warp(...) with one Uniform() of rng (none when greedy).
int32_t Sample(std::span<const float> logits, const SamplingParams& params,
               std::span<const int32_t> history, Rng& rng);

}  // namespace specline
