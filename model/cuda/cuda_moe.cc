// The mixture-of-experts MLP of a CUDA stage (docs/architecture.md "Phi-3
// and mixture of experts"): the router's logits come back to the host,
// which picks each row's experts exactly as the CPU runtime does
// (RouteTopK), groups the rows by expert and uploads the grouping; then each
// picked expert runs one fused gate/up GEMM, SwiGLU and one down GEMM over
// its gathered rows (its weights read once per call, other experts not at
// all), and its output is added, weighted, to its rows in fp32.
//
// The host round trip makes a MoE layer synchronous, so MoE slices run
// eagerly (no captured graphs).
#include <vector>

#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/cuda_stage_slice.h"
#include "model/runtime/moe_mlp.h"

namespace specline::cuda {

void CudaStageSlice::RunMoe(int local, int rows) {
  const ModelConfig& c = config_;
  const DeviceLayerWeights& w = layers_[local];
  const DType t = options_.dtype;
  const int n = rows, E = c.n_experts, k = c.n_experts_used, h = c.expert_hidden_dim;
  const int dim = c.dim;
  const int64_t eb = ElementBytes(t);
  const int64_t pairs = int64_t{n} * k;

  const size_t logits_bytes = size_t(n) * E * sizeof(float);
  const size_t meta_bytes = size_t(pairs) * (sizeof(int32_t) + sizeof(float));
  const size_t rows_bytes = size_t(n) * dim * eb;
  const size_t acc_bytes = size_t(n) * dim * sizeof(float);
  // Growing a buffer frees the old one, which earlier work on the stream
  // (a previous layer's or call's copies and kernels) may still use.
  if (moe_logits_.bytes() < logits_bytes || moe_host_.bytes() < logits_bytes + meta_bytes ||
      moe_meta_.bytes() < meta_bytes || moe_x_.bytes() < rows_bytes ||
      moe_y_.bytes() < rows_bytes || moe_acc_.bytes() < acc_bytes) {
    SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    moe_logits_.Resize(logits_bytes);
    moe_host_.Resize(logits_bytes + meta_bytes);
    moe_meta_.Resize(meta_bytes);
    moe_x_.Resize(rows_bytes);
    moe_y_.Resize(rows_bytes);
    moe_acc_.Resize(acc_bytes);
  }

  // Router logits in fp32, to the host.
  gemm_->Run(w.router.view, xb_.get(), n, moe_logits_.get(), /*y_f32=*/true);
  auto* logits = moe_host_.as<float>();
  SPECLINE_CUDA_CHECK(cudaMemcpyAsync(logits, moe_logits_.get(), logits_bytes,
                                      cudaMemcpyDeviceToHost, stream_));
  // Also orders this layer's routing after the previous layer's uploads
  // from the same pinned buffer.
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream_));

  // Route, then group by expert: rows[] and weights[] hold expert 0's
  // (row, weight) pairs, then expert 1's, ...
  std::vector<int> chosen(pairs);
  std::vector<float> weight(pairs);
  std::vector<int> count(E, 0);
  for (int i = 0; i < n; ++i) {
    RouteTopK(logits + int64_t{i} * E, E, k, c.moe_routing, chosen.data() + int64_t{i} * k,
              weight.data() + int64_t{i} * k);
    for (int r = 0; r < k; ++r) ++count[chosen[int64_t{i} * k + r]];
  }
  std::vector<int> first(E + 1, 0);
  for (int e = 0; e < E; ++e) first[e + 1] = first[e] + count[e];
  auto* host_rows = reinterpret_cast<int32_t*>(moe_host_.as<uint8_t>() + logits_bytes);
  auto* host_w = reinterpret_cast<float*>(host_rows + pairs);
  std::vector<int> fill(first.begin(), first.end() - 1);
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < k; ++r) {
      const int e = chosen[int64_t{i} * k + r];
      host_rows[fill[e]] = i;
      host_w[fill[e]] = weight[int64_t{i} * k + r];
      ++fill[e];
    }
  }
  SPECLINE_CUDA_CHECK(cudaMemcpyAsync(moe_meta_.get(), host_rows, meta_bytes,
                                      cudaMemcpyHostToDevice, stream_));
  const auto* d_rows = moe_meta_.as<int32_t>();
  const auto* d_w = reinterpret_cast<const float*>(d_rows + pairs);

  SPECLINE_CUDA_CHECK(cudaMemsetAsync(moe_acc_.get(), 0, acc_bytes, stream_));
  for (int e = 0; e < E; ++e) {
    const int m = count[e];
    if (m == 0) continue;  // never read
    GatherRows(t, xb_.get(), dim, d_rows + first[e], m, dim, moe_x_.get(), stream_);
    gemm_->Run(w.e_gate_up[e].view, moe_x_.get(), m, gate_up_.get());
    SwiGlu(t, gate_up_.get(), m, h, h_.get(), stream_);
    gemm_->Run(w.e_down[e].view, h_.get(), m, moe_y_.get());
    ScatterAddScaled(t, moe_y_.get(), m, dim, d_rows + first[e], d_w + first[e],
                     moe_acc_.as<float>(), stream_);
  }
  // The layer's MLP output, where the next layer's fused add + norm takes it.
  FromFloat(t, moe_acc_.as<float>(), int64_t{n} * dim, delta_.get(), stream_);
}

}  // namespace specline::cuda
