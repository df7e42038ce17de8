// PTP's coupled sampling (docs/ptp.md): every generated-token index t has
// its own uniform u_t, a pure function of (seed, t), and the token at t is
// the vocabulary-order inverse CDF of the warped teacher distribution at
// u_t. A PTP call proposes tokens for the next indices from the same u's;
// verification recomputes the teacher's token at each index and keeps the
// longest prefix of proposals that agrees, plus the teacher's own token at
// the first disagreement. The output is therefore exactly what plain
// sampling with the same u's produces: lossless by construction, whatever
// the proposals are. This file is the arithmetic the Python reference
// (training/specline_train/ptp.py) pins with training/tests/data/ptp_golden.json.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/runtime/sampler.h"

namespace specline {

// u for generated-token index t (0 = the first token after the prompt):
// SplitMix64's (t+1)-th output for a generator seeded with `seed`, top 53
// bits / 2^53, so u is in [0, 1) and exact in a double. Counter-based, so
// proposals can look ahead without consuming a stream.
double PtpUniform(uint64_t seed, int64_t t);

// The sampling distribution in vocabulary order, in double: temperature
// <= 0 is one-hot at the argmax (lowest index on ties); else softmax(l / T),
// then top-k (most probable first, lower index first on ties), then top-p
// (a token stays while the mass before it is < top_p), then min-p (tokens
// below min_p times the most probable one's probability go), renormalised.
std::vector<double> CoupledDistribution(std::span<const float> logits, float temperature, int top_k,
                                        float top_p, float min_p = 0.0f);

// The smallest index whose running sum (summed in order) exceeds u; when
// rounding leaves the total <= u, the last index with non-zero probability.
int32_t CoupledPick(std::span<const double> probs, double u);

// CoupledPick(CoupledDistribution(...), u).
int32_t CoupledToken(std::span<const float> logits, float temperature, int top_k, float top_p, double u);

// The token a request's sampler settings give at u: ProcessLogits (bias,
// mask, repetition, presence and frequency penalties, as Warp applies
// them), then CoupledToken with its temperature, top-k, top-p and min-p.
// What the scheduler uses for every token of a PTP request, so PTP's output
// equals plain decoding at the same u.
int32_t CoupledSample(std::span<const float> logits, const SamplingParams& params,
                      const SamplingContext& ctx, double u);

struct PtpVerdict {
  int accepted = 0;             // proposals kept
  std::vector<int32_t> tokens;  // the kept proposals + the teacher's token after them
};

// teacher_tokens[j] = CoupledToken(teacher row j, u of index j), for
// j = 0..m (one more than the proposals). Accepts the longest prefix where
// proposals[j] == teacher_tokens[j]; throws std::invalid_argument when
// there are fewer than proposals.size() + 1 teacher tokens.
PtpVerdict PtpAccept(std::span<const int32_t> teacher_tokens, std::span<const int32_t> proposals);

}  // namespace specline
