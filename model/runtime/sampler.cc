#include "model/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "model/splitmix64.h"

namespace specline {
namespace {

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

int32_t ArgmaxOf(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

std::string SamplingParams::Validate(int32_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0) return "temperature must be >= 0";
  if (top_k < 0) return "top_k must be >= 0 (0 disables it)";
  if (!(top_p > 0.0f && top_p <= 1.0f)) return "top_p must be in (0, 1]";
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return "min_p must be in [0, 1]";
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return "repetition_penalty must be > 0";
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return "presence_penalty must be in [-2, 2]";
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return "frequency_penalty must be in [-2, 2]";
  }
  if (logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return "logit_bias may have at most 300 entries";
  }
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto [id, bias] = logit_bias[i];
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return "logit_bias: token id " + std::to_string(id) + " is not in the vocabulary";
    }
    if (i > 0 && logit_bias[i - 1].first >= id) return "logit_bias: ids must ascend, each once";
    if (!(bias >= -100.0f && bias <= 100.0f)) return "logit_bias values must be in [-100, 100]";
  }
  return "";
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix64(seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

float TokenDistribution::Prob(int32_t id) const {
  auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return (it != ids.end() && *it == id) ? probs[it - ids.begin()] : 0.0f;
}

int32_t TokenDistribution::Argmax() const {
  return ids[std::max_element(probs.begin(), probs.end()) - probs.begin()];
}

int32_t TokenDistribution::InverseCdf(double u) const {
  double cdf = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cdf += probs[i];
    if (u < cdf) return ids[i];
  }
  // Rounding left the total a hair under 1: u fell in the last bin.
  return ids.back();
}

void ApplyRepetitionPenalty(std::span<float> logits, float penalty,
                            std::span<const int32_t> history) {
  if (penalty == 1.0f) return;
  std::unordered_set<int32_t> seen;
  for (int32_t id : history) {
    if (id < 0 || id >= static_cast<int32_t>(logits.size()) || !seen.insert(id).second) continue;
    float& l = logits[id];
    l = l > 0 ? l / penalty : l * penalty;
  }
}

void ProcessLogits(std::span<float> logits, const SamplingParams& params,
                   const SamplingContext& ctx) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && id < vocab) logits[id] += bias;
  }
  if (!ctx.allowed.empty()) {
    bool any = false;
    for (int32_t t = 0; t < vocab; ++t) {
      if (TokenAllowed(ctx.allowed, t)) {
        any = true;
      } else {
        logits[t] = -INFINITY;
      }
    }
    if (!any) throw std::invalid_argument("ProcessLogits: the token mask allows no token");
  }
  ApplyRepetitionPenalty(logits, params.repetition_penalty, ctx.history);
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    const size_t from = std::min<size_t>(std::max<int32_t>(ctx.prompt_len, 0), ctx.history.size());
    std::unordered_map<int32_t, int32_t> count;
    for (size_t i = from; i < ctx.history.size(); ++i) {
      const int32_t id = ctx.history[i];
      if (id >= 0 && id < vocab) ++count[id];
    }
    for (const auto& [id, c] : count) {
      logits[id] -= params.presence_penalty + params.frequency_penalty * static_cast<float>(c);
    }
  }
}

TokenDistribution Warp(std::span<const float> logits, const SamplingParams& params,
                       const SamplingContext& ctx) {
  std::vector<float> z(logits.begin(), logits.end());
  ProcessLogits(z, params, ctx);
  TokenDistribution d;
  if (params.greedy()) {
    d.ids = {ArgmaxOf(z)};
    d.probs = {1.0f};
    return d;
  }
  const int32_t vocab = static_cast<int32_t>(z.size());
  // Candidates by descending logit (ties: lower id first, for determinism).
  std::vector<int32_t> cand(vocab);
  std::iota(cand.begin(), cand.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  int32_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::nth_element(cand.begin(), cand.begin() + keep, cand.end(), by_logit);
    cand.resize(keep);
  }
  // Softmax at temperature over the kept candidates, in double for a stable
  // top-p cut.
  const double inv_t = 1.0 / params.temperature;
  double max_z = -INFINITY;
  for (int32_t id : cand) max_z = std::max<double>(max_z, z[id]);
  std::vector<double> p(cand.size());
  double sum = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) sum += p[i] = std::exp((z[cand[i]] - max_z) * inv_t);
  for (double& v : p) v /= sum;

  std::vector<size_t> order(cand.size());
  std::iota(order.begin(), order.end(), 0);
  // Masked tokens are out of the distribution, not merely improbable: a
  // draw that rounds past the last bin must not land on one.
  std::erase_if(order, [&](size_t i) { return z[cand[i]] == -INFINITY; });
  if (params.top_p < 1.0f) {
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return by_logit(cand[a], cand[b]); });
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double cum = 0.0;
    size_t n = 0;
    while (n < order.size()) {
      cum += p[order[n++]];
      if (cum >= params.top_p) break;
    }
    order.resize(n);
  }
  if (params.min_p > 0.0f) {
    double top = 0.0;
    for (size_t i : order) top = std::max(top, p[i]);
    const double floor = params.min_p * top;
    std::erase_if(order, [&](size_t i) { return p[i] < floor; });
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cand[a] < cand[b]; });
  double kept = 0.0;
  for (size_t i : order) kept += p[i];
  d.ids.reserve(order.size());
  d.probs.reserve(order.size());
  for (size_t i : order) {
    d.ids.push_back(cand[i]);
    d.probs.push_back(static_cast<float>(p[i] / kept));
  }
  return d;
}

int32_t Sample(std::span<const float> logits, const SamplingParams& params,
               const SamplingContext& ctx, Rng& rng) {
  if (params.ArgmaxSuffices() && ctx.allowed.empty()) return ArgmaxOf(logits);
  TokenDistribution d = Warp(logits, params, ctx);
  return params.greedy() ? d.ids[0] : d.InverseCdf(rng.Uniform());
}

}  // namespace specline
