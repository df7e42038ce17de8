#include "model/runtime/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace specline {

TokenLogprob ComputeLogprobs(std::span<const float> logits, const SamplingParams& params,
                             const SamplingContext& ctx, int32_t token, int top_n) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (token < 0 || token >= vocab) throw std::invalid_argument("ComputeLogprobs: token out of range");
  top_n = std::clamp(top_n, 0, std::min(kMaxTopLogprobs, vocab));
  std::vector<float> z(logits.begin(), logits.end());
  ProcessLogits(z, params, ctx);
  // Log-sum-exp in double at the sampling temperature; greedy decoding
  // reports the untempered distribution it took the argmax of.
  const double inv_t = params.greedy() ? 1.0 : 1.0 / params.temperature;
  const double max_z = *std::max_element(z.begin(), z.end());
  double sum = 0.0;
  for (float v : z) sum += std::exp((static_cast<double>(v) - max_z) * inv_t);
  const double lse = std::log(sum);
  auto logprob = [&](int32_t t) {
    if (z[t] == -INFINITY) return -INFINITY;
    return static_cast<float>((static_cast<double>(z[t]) - max_z) * inv_t - lse);
  };
  TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  if (top_n > 0) {
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(), [&](int32_t a, int32_t b) {
      return z[a] > z[b] || (z[a] == z[b] && a < b);
    });
    for (int i = 0; i < top_n && z[ids[i]] != -INFINITY; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  }
  return out;
}

}  // namespace specline
