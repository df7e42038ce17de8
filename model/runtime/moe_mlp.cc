#include "model/runtime/moe_mlp.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace specline {

void RouteTopK(const float* logits, int n_experts, int k, MoeRouting routing, int* experts,
               float* weights) {
  // Partial selection by (logit desc, index asc): softmax is monotone, so
  // the k largest logits are the k largest probabilities.
  std::vector<int> order(n_experts);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float max = logits[order[0]];
  // float accumulation in index order, as transformers' float32 softmax.
  float total = 0.0f;
  for (int e = 0; e < n_experts; ++e) total += std::exp(logits[e] - max);
  float picked = 0.0f;
  for (int r = 0; r < k; ++r) {
    experts[r] = order[r];
    weights[r] = std::exp(logits[order[r]] - max) / total;
    picked += weights[r];
  }
  if (routing == MoeRouting::kSoftmaxTopKRenorm) {
    for (int r = 0; r < k; ++r) weights[r] /= picked;
  }
}

void MoeMlp::Forward(const ModelConfig& c, const LayerWeights& w, const float* x, int64_t n,
                     float* out, kernels::ThreadPool& pool) {
  const int n_exp = c.n_experts, k = c.n_experts_used;
  const int64_t dim = c.dim, h = c.expert_hidden_dim;
  logits_.resize(n * n_exp);
  kernels::MatMul(w.router, x, n, logits_.data(), pool);
  chosen_.resize(n * k);
  weights_.resize(n * k);
  slots_of_.resize(n_exp);
  for (auto& s : slots_of_) s.clear();
  for (int64_t i = 0; i < n; ++i) {
    RouteTopK(logits_.data() + i * n_exp, n_exp, k, c.moe_routing, chosen_.data() + i * k,
              weights_.data() + i * k);
    for (int r = 0; r < k; ++r) slots_of_[chosen_[i * k + r]].push_back(i * k + r);
  }

  // Each picked expert once, on all the rows that picked it.
  results_.resize(n * k * dim);
  read_.clear();
  for (int e = 0; e < n_exp; ++e) {
    const std::vector<int64_t>& slots = slots_of_[e];
    if (slots.empty()) continue;
    read_.push_back(e);
    const int64_t m = static_cast<int64_t>(slots.size());
    gathered_.resize(m * dim);
    for (int64_t j = 0; j < m; ++j) {
      std::copy_n(x + (slots[j] / k) * dim, dim, gathered_.data() + j * dim);
    }
    gate_.resize(m * h);
    up_.resize(m * h);
    down_.resize(m * dim);
    kernels::MatMul(w.e_gate[e], gathered_.data(), m, gate_.data(), pool);
    kernels::MatMul(w.e_up[e], gathered_.data(), m, up_.data(), pool);
    for (int64_t j = 0; j < m; ++j) kernels::SwiGlu(gate_.data() + j * h, up_.data() + j * h, h);
    kernels::MatMul(w.e_down[e], gate_.data(), m, down_.data(), pool);
    for (int64_t j = 0; j < m; ++j) {
      std::copy_n(down_.data() + j * dim, dim, results_.data() + slots[j] * dim);
    }
  }

  // Per row, in its own rank order: the sum does not depend on the batch.
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * dim;
    std::fill_n(o, dim, 0.0f);
    for (int r = 0; r < k; ++r) {
      const float wt = weights_[i * k + r];
      const float* y = results_.data() + (i * k + r) * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += wt * y[d];
    }
  }
}

}  // namespace specline
