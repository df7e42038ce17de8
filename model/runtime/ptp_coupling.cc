#include "model/runtime/ptp_coupling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace specline {

double PtpUniform(uint64_t seed, int64_t t) {
  // SplitMix64: the state advances by the golden gamma, then is mixed.
  uint64_t z = seed + static_cast<uint64_t>(t + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);  // 2^53
}

std::vector<double> CoupledDistribution(std::span<const float> logits, float temperature, int top_k,
                                        float top_p, float min_p) {
  const size_t v = logits.size();
  if (v == 0) throw std::invalid_argument("CoupledDistribution: empty logits");
  std::vector<double> p(v, 0.0);
  if (temperature <= 0.0f) {
    p[std::max_element(logits.begin(), logits.end()) - logits.begin()] = 1.0;  // first maximum
    return p;
  }
  const double t = temperature;
  double max_l = -INFINITY;
  for (float l : logits) max_l = std::max(max_l, static_cast<double>(l) / t);
  double sum = 0.0;
  for (size_t i = 0; i < v; ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) / t - max_l);
  for (double& x : p) x /= sum;
  const bool use_k = top_k > 0 && static_cast<size_t>(top_k) < v;
  if (!use_k && top_p >= 1.0f && min_p <= 0.0f) return p;
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  size_t kept = use_k ? static_cast<size_t>(top_k) : v;
  if (top_p < 1.0f) {
    double kept_mass = 0.0;  // top-p runs on the top-k distribution, renormalised
    for (size_t i = 0; i < kept; ++i) kept_mass += p[order[i]];
    double before = 0.0;
    size_t n = 0;
    while (n < kept && before < top_p) before += p[order[n++]] / kept_mass;
    kept = n;
  }
  if (min_p > 0.0f) {
    // order is by descending probability: the kept tokens below the floor
    // are a suffix of it (the most probable one always stays).
    const double floor = min_p * p[order[0]];
    while (kept > 1 && p[order[kept - 1]] < floor) --kept;
  }
  std::vector<double> out(v, 0.0);
  double kept_sum = 0.0;
  for (size_t i = 0; i < kept; ++i) kept_sum += out[order[i]] = p[order[i]];
  for (double& x : out) x /= kept_sum;
  return out;
}

int32_t CoupledPick(std::span<const double> probs, double u) {
  double cdf = 0.0;
  int32_t last_nonzero = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    cdf += probs[i];
    if (probs[i] > 0.0) last_nonzero = static_cast<int32_t>(i);
    if (cdf > u) return static_cast<int32_t>(i);
  }
  if (last_nonzero < 0) throw std::invalid_argument("CoupledPick: all probabilities are zero");
  return last_nonzero;
}

int32_t CoupledToken(std::span<const float> logits, float temperature, int top_k, float top_p, double u) {
  const std::vector<double> p = CoupledDistribution(logits, temperature, top_k, top_p);
  return CoupledPick(p, u);
}

int32_t CoupledSample(std::span<const float> logits, const SamplingParams& params,
                      const SamplingContext& ctx, double u) {
  std::vector<float> processed;
  if (!params.ArgmaxSuffices() || !ctx.allowed.empty()) {
    processed.assign(logits.begin(), logits.end());
    ProcessLogits(processed, params, ctx);
    logits = processed;
  }
  const std::vector<double> p =
      CoupledDistribution(logits, params.temperature, params.top_k, params.top_p, params.min_p);
  return CoupledPick(p, u);
}

PtpVerdict PtpAccept(std::span<const int32_t> teacher_tokens, std::span<const int32_t> proposals) {
  if (teacher_tokens.size() < proposals.size() + 1) {
    throw std::invalid_argument("PtpAccept: needs one teacher token more than the proposals");
  }
  PtpVerdict v;
  while (v.accepted < static_cast<int>(proposals.size()) && proposals[v.accepted] == teacher_tokens[v.accepted]) {
    v.tokens.push_back(proposals[v.accepted]);
    ++v.accepted;
  }
  v.tokens.push_back(teacher_tokens[v.accepted]);
  return v;
}

}  // namespace specline
