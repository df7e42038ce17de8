// The mixture-of-experts MLP of one layer on the CPU (qwen3moe, Mixtral,
// OLMoE): a router picks n_experts_used experts per row, and the row's output
// is the weighted sum of those experts' SwiGLU MLPs.
//
// Only the picked experts' matrices are read: each expert is a view into the
// file's memory map in its file dtype, and kernels::MatMul runs on the rows
// routed to it. A batch (a prefill chunk, or a verification of k drafts) is
// grouped by expert, so each picked expert's weights stream through once per
// call however many rows picked it.
//
// Bit-for-bit batch invariance (what speculative verification relies on):
// kernels::MatMul's output row depends only on its input row (not on m, the
// path or the thread count), routing is per row, and a row's expert outputs
// are summed in the row's own top-k rank order. So a row's result is the
// same alone or in any batch, at any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/model_config.h"
#include "model/runtime/weights.h"

namespace specline {

// Picks the k largest of n_experts router logits (ties: lower index first)
// into experts[0..k), best first, and their weights per `routing`: softmax
// over all experts, optionally renormalised over the k picked.
void RouteTopK(const float* logits, int n_experts, int k, MoeRouting routing, int* experts,
               float* weights);

class MoeMlp {
 public:
  // out[i] = sum over row i's picked experts e of weight * down_e(silu(gate_e
  // x_i) * up_e x_i), for n rows x (already normed) of width config.dim.
  // `out` (n * dim) must not overlap x.
  void Forward(const ModelConfig& config, const LayerWeights& w, const float* x, int64_t n,
               float* out, kernels::ThreadPool& pool);

  // Experts whose weights the last Forward read (ascending): for tests.
  const std::vector<int>& last_experts_read() const { return read_; }

 private:
  // Scratch reused across calls.
  std::vector<float> logits_, weights_, gathered_, gate_, up_, down_, results_;
  std::vector<int> chosen_, read_;
  std::vector<std::vector<int64_t>> slots_of_;  // per expert: row * k + rank
};

}  // namespace specline
