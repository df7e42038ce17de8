// Oracle drafter (benchmarks and tests only): told the true next token, it
// proposes it with probability alpha and otherwise a uniformly random
// different token. This runs the speculative pipeline at a chosen acceptance
// rate without trained heads.
//
// With greedy verification the true token is the target argmax, so a draft is
// accepted iff the oracle told the truth: acceptance is alpha in expectation,
// exactly. The oracle is a deterministic (point-mass) drafter: under sampled
// verification pass q = one-hot(proposal) to VerifyDraft, which is lossless
// for any proposal but accepts with probability p(proposal), not alpha.
#pragma once

#include <cstdint>

#include "model/runtime/sampler.h"

namespace specline {

class OracleDrafter {
 public:
  // alpha in [0, 1] (std::invalid_argument otherwise). A seed fixes every
  // proposal.
  OracleDrafter(double alpha, uint64_t seed);

  // true_token with probability alpha, else a token drawn uniformly from
  // [0, vocab_size) \ {true_token}. One Uniform() when truthful, two when
  // not. Throws std::invalid_argument when vocab_size < 2 or true_token is
  // out of range.
  int32_t Propose(int32_t true_token, int32_t vocab_size);

  double alpha() const { return alpha_; }

 private:
  double alpha_;
  Rng rng_;
};

}  // namespace specline
