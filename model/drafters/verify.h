// Lossless verification of one speculated token (speculative decoding).
//
// A drafter proposes x drawn from its distribution q; the target model then
// gives p for the same position. VerifyDraft either keeps x or replaces it so
// that the emitted token is distributed exactly as p, whatever q is:
//
//   accept x with probability a(x) = min(1, p(x) / q(x));
//   on rejection, draw y from the residual r(y) = max(0, p(y) - q(y)) / Z,
//   Z = sum_y max(0, p(y) - q(y)) = 1 - sum_y min(p(y), q(y)).
//
// Why this is lossless: the output is y either because x = y was drafted and
// accepted, or because some draft was rejected and y came from the residual:
//
//   P(out = y) = q(y) a(y) + P(reject) r(y)
//              = min(q(y), p(y)) + (sum_x q(x) (1 - a(x))) r(y)
//              = min(p(y), q(y)) + (1 - sum_x min(p(x), q(x))) r(y)
//              = min(p(y), q(y)) + Z * max(0, p(y) - q(y)) / Z
//              = min(p(y), q(y)) + max(0, p(y) - q(y))  =  p(y).
//
// When Z = 0 (p == q) a rejection cannot happen in exact arithmetic; with
// float rounding it can (a hair), and the fallback is to sample p itself.
//
// Deterministic drafters (the oracle, a greedy head, PTP proposals) are the
// special case q = one-hot(x): then a(x) = p(x) and the residual is p
// restricted to y != x and renormalised by 1 - p(x). Given any x chosen
// independently of the verifier's uniforms, the output is again exactly p
// (P(out = x) = p(x); P(out = y != x) = (1 - p(x)) p(y) / (1 - p(x))), so
// point-mass drafts are verified losslessly by the same function.
//
// Greedy decoding (p one-hot on the argmax) reduces to VerifyGreedy: accept
// iff the draft equals the target argmax, otherwise emit the argmax.
//
// Randomness: exactly one rng.Uniform() on acceptance and two on rejection
// (accept test, then the residual's vocabulary-order inverse CDF), so a seed
// fixes the whole verified stream.
#pragma once

#include <cstdint>

#include "model/runtime/sampler.h"

namespace specline {

struct VerifyResult {
  bool accepted = false;
  int32_t token = -1;  // the draft token when accepted, else the replacement
};

// min(1, p(x) / q(x)). Throws std::invalid_argument when q(x) == 0 (x was
// not drawn from q).
double AcceptProbability(const TokenDistribution& target_p, const TokenDistribution& draft_q,
                         int32_t draft_token);

// The normalised residual max(0, p - q) / Z over tokens with positive
// residual, ids ascending; p itself when Z == 0 (p == q). Computed in double,
// stored as TokenDistribution's floats.
TokenDistribution ResidualDistribution(const TokenDistribution& target_p,
                                       const TokenDistribution& draft_q);

// Rejection-sampling verification of `draft_token` ~ draft_q against
// target_p (both under the request's warping). Throws std::invalid_argument
// when draft_q gives draft_token no mass or target_p is empty.
VerifyResult VerifyDraft(const TokenDistribution& target_p, const TokenDistribution& draft_q,
                         int32_t draft_token, Rng& rng);

// Greedy verification: accept iff draft_token == target_argmax; the
// replacement is the argmax. Consumes no randomness.
VerifyResult VerifyGreedy(int32_t target_argmax, int32_t draft_token);

}  // namespace specline
