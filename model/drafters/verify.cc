#include "model/drafters/verify.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace specline {

double AcceptProbability(const TokenDistribution& target_p, const TokenDistribution& draft_q,
                         int32_t draft_token) {
  const double q = draft_q.Prob(draft_token);
  if (!(q > 0.0)) {
    throw std::invalid_argument("VerifyDraft: draft token " + std::to_string(draft_token) +
                                " has zero probability under the draft distribution q");
  }
  const double p = target_p.Prob(draft_token);
  return std::min(1.0, p / q);
}

TokenDistribution ResidualDistribution(const TokenDistribution& target_p,
                                       const TokenDistribution& draft_q) {
  // Only tokens in p's support can have p - q > 0; walk p and look q up
  // (both id lists are ascending, so a merge would do, but Prob is a binary
  // search and the supports are small after warping).
  std::vector<double> mass(target_p.ids.size());
  double z = 0.0;
  for (size_t i = 0; i < target_p.ids.size(); ++i) {
    const double d = static_cast<double>(target_p.probs[i]) - draft_q.Prob(target_p.ids[i]);
    mass[i] = d > 0.0 ? d : 0.0;
    z += mass[i];
  }
  if (!(z > 0.0)) return target_p;  // p == q: nothing left over, sample p
  TokenDistribution r;
  for (size_t i = 0; i < target_p.ids.size(); ++i) {
    if (mass[i] > 0.0) {
      r.ids.push_back(target_p.ids[i]);
      r.probs.push_back(static_cast<float>(mass[i] / z));
    }
  }
  return r;
}

VerifyResult VerifyDraft(const TokenDistribution& target_p, const TokenDistribution& draft_q,
                         int32_t draft_token, Rng& rng) {
  if (target_p.ids.empty()) throw std::invalid_argument("VerifyDraft: empty target distribution");
  const double a = AcceptProbability(target_p, draft_q, draft_token);
  // u in [0, 1): accepted with probability exactly a (never when p(x) = 0,
  // always when a = 1).
  if (rng.Uniform() < a) return {true, draft_token};
  return {false, ResidualDistribution(target_p, draft_q).InverseCdf(rng.Uniform())};
}

VerifyResult VerifyGreedy(int32_t target_argmax, int32_t draft_token) {
  return {draft_token == target_argmax, target_argmax};
}

}  // namespace specline
