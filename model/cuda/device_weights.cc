#include "model/cuda/device_weights.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "model/runtime/weights.h"

namespace specline::cuda {
namespace {

// Converts `rows` rows of a host matrix (any file dtype) into `t` at `dst`
// (host, rows * cols elements of 16 bits).
void ConvertRows(const kernels::WeightMatrix& m, DType t, uint16_t* dst) {
  std::vector<float> row(m.cols);
  for (int64_t r = 0; r < m.rows; ++r) {
    kernels::DequantizeRow(m.dtype, static_cast<const uint8_t*>(m.data) + r * m.row_bytes, m.cols,
                           row.data());
    uint16_t* out = dst + r * m.cols;
    for (int64_t c = 0; c < m.cols; ++c) {
      out[c] = t == DType::kBF16 ? kernels::F32ToBF16(row[c]) : kernels::F32ToF16(row[c]);
    }
  }
}

// Stacks host matrices (same cols) into one device matrix, in order.
OwnedMatrix Stack(const std::vector<kernels::WeightMatrix>& parts, DType t) {
  const int64_t eb = ElementBytes(t);
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.rows;
  const int64_t cols = parts.front().cols;
  std::vector<uint16_t> host(rows * cols);
  int64_t at = 0;
  for (const auto& p : parts) {
    if (p.cols != cols) throw std::invalid_argument("stacked matrices differ in width");
    ConvertRows(p, t, host.data() + at * cols);
    at += p.rows;
  }
  OwnedMatrix m;
  m.buffer.Resize(rows * cols * eb);
  SPECLINE_CUDA_CHECK(
      cudaMemcpy(m.buffer.get(), host.data(), rows * cols * eb, cudaMemcpyHostToDevice));
  m.view = DeviceMatrix{t, m.buffer.get(), rows, cols};
  return m;
}

DeviceBuffer ConcatFloats(const std::vector<const std::vector<float>*>& parts) {
  std::vector<float> all;
  for (const auto* p : parts) all.insert(all.end(), p->begin(), p->end());
  return UploadFloats(all);
}

// Seeds per (model seed, layer, tensor) so a layer's values do not depend
// on which other layers a slice holds.
uint64_t TensorSeed(uint64_t seed, int layer, int tensor) {
  return seed * 0x9E3779B97F4A7C15ull + uint64_t(layer) * 1000003ull + uint64_t(tensor) * 7919ull;
}

DeviceBuffer NormOnes(int64_t n, uint64_t seed) {
  // 1 +- 0.1, like random_model.h's norm weights.
  DeviceBuffer b(n * sizeof(float));
  FillUniformF32(b.as<float>(), n, seed, 0.9f, 1.1f, nullptr);
  return b;
}

}  // namespace

int64_t ElementBytes(DType t) {
  if (t == DType::kBF16 || t == DType::kF16) return 2;
  throw std::invalid_argument("the GPU backend computes in bf16 or fp16, not " +
                              std::string(DTypeName(t)));
}

int64_t DeviceLayerWeights::matrix_bytes() const {
  int64_t total = 0;
  for (const OwnedMatrix* m : {&wqkv, &wo, &w_gate_up, &w_down, &router}) {
    if (m->view.rows > 0) total += m->view.rows * m->view.cols * ElementBytes(m->view.t);
  }
  if (!e_gate_up.empty()) {
    const auto bytes = [](const OwnedMatrix& m) {
      return m.view.rows * m.view.cols * ElementBytes(m.view.t);
    };
    total += experts_used * (bytes(e_gate_up[0]) + bytes(e_down[0]));
  }
  return total;
}

DeviceBuffer UploadFloats(const std::vector<float>& values) {
  DeviceBuffer b(std::max<size_t>(values.size(), 1) * sizeof(float));
  if (!values.empty()) {
    SPECLINE_CUDA_CHECK(cudaMemcpy(b.get(), values.data(), values.size() * sizeof(float),
                                   cudaMemcpyHostToDevice));
  }
  return b;
}

OwnedMatrix LoadMatrix(const ModelSource& src, const std::string& name, int64_t rows,
                       int64_t cols, DType t) {
  return Stack({MatrixOf(src.Require(name, {rows, cols}))}, t);
}

OwnedMatrix RandomMatrix(int64_t rows, int64_t cols, DType t, uint64_t seed, float scale) {
  OwnedMatrix m;
  m.buffer.Resize(rows * cols * ElementBytes(t));
  FillUniform(t, m.buffer.get(), rows * cols, seed, scale, nullptr);
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  m.view = DeviceMatrix{t, m.buffer.get(), rows, cols};
  return m;
}

DeviceLayerWeights LoadLayer(const ModelSource& src, int layer, DType t) {
  const LayerWeights host = LayerWeights::Load(src, layer);  // checks every shape
  DeviceLayerWeights w;
  w.attn_norm = UploadFloats(host.attn_norm);
  w.ffn_norm = UploadFloats(host.ffn_norm);
  w.wqkv = Stack({host.wq, host.wk, host.wv}, t);
  w.wo = Stack({host.wo}, t);
  if (!src.config().IsMoe()) {
    w.w_gate_up = Stack({host.w_gate, host.w_up}, t);
    w.w_down = Stack({host.w_down}, t);
  }
  w.has_bias = !host.bq.empty();
  if (w.has_bias) w.bqkv = ConcatFloats({&host.bq, &host.bk, &host.bv});
  w.has_qk_norm = !host.q_norm.empty();
  if (w.has_qk_norm) {
    w.q_norm = UploadFloats(host.q_norm);
    w.k_norm = UploadFloats(host.k_norm);
  }
  w.has_post_norms = !host.post_attn_norm.empty();
  if (w.has_post_norms) {
    w.post_attn_norm = UploadFloats(host.post_attn_norm);
    w.post_ffw_norm = UploadFloats(host.post_ffw_norm);
  }
  if (src.config().IsMoe()) {
    w.router = Stack({host.router}, t);
    for (size_t e = 0; e < host.e_gate.size(); ++e) {
      w.e_gate_up.push_back(Stack({host.e_gate[e], host.e_up[e]}, t));
      w.e_down.push_back(Stack({host.e_down[e]}, t));
    }
    w.experts_used = src.config().n_experts_used;
  }
  return w;
}

DeviceLayerWeights RandomLayer(const ModelConfig& c, int layer, DType t, uint64_t seed) {
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  // Uniform in [-a, a) has std a / sqrt(3): a = sqrt(3 / fan_in) gives std
  // 1 / sqrt(fan_in), random_model.h's scale.
  auto scale = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  DeviceLayerWeights w;
  w.attn_norm = NormOnes(c.dim, TensorSeed(seed, layer, 0));
  w.ffn_norm = NormOnes(c.dim, TensorSeed(seed, layer, 1));
  w.wqkv = RandomMatrix(q_dim + 2 * kv_dim, c.dim, t, TensorSeed(seed, layer, 2), scale(c.dim));
  w.wo = RandomMatrix(c.dim, q_dim, t, TensorSeed(seed, layer, 3), scale(q_dim));
  if (!c.IsMoe()) {
    w.w_gate_up = RandomMatrix(2 * int64_t{c.hidden_dim}, c.dim, t, TensorSeed(seed, layer, 4),
                               scale(c.dim));
    w.w_down =
        RandomMatrix(c.dim, c.hidden_dim, t, TensorSeed(seed, layer, 5), scale(c.hidden_dim));
  }
  if (c.qkv_bias) {
    w.has_bias = true;
    w.bqkv.Resize((q_dim + 2 * kv_dim) * sizeof(float));
    FillUniformF32(w.bqkv.as<float>(), q_dim + 2 * kv_dim, TensorSeed(seed, layer, 6), -0.1f,
                   0.1f, nullptr);
  }
  if (c.qk_norm) {
    w.has_qk_norm = true;
    const int64_t q = c.qk_norm_full ? q_dim : c.head_dim;
    const int64_t k = c.qk_norm_full ? kv_dim : c.head_dim;
    w.q_norm = NormOnes(q, TensorSeed(seed, layer, 7));
    w.k_norm = NormOnes(k, TensorSeed(seed, layer, 8));
  }
  if (c.IsMoe()) {
    const int64_t h = c.expert_hidden_dim;
    w.router = RandomMatrix(c.n_experts, c.dim, t, TensorSeed(seed, layer, 9), scale(c.dim));
    for (int e = 0; e < c.n_experts; ++e) {
      w.e_gate_up.push_back(
          RandomMatrix(2 * h, c.dim, t, TensorSeed(seed, layer, 10 + 2 * e), scale(c.dim)));
      w.e_down.push_back(
          RandomMatrix(c.dim, h, t, TensorSeed(seed, layer, 11 + 2 * e), scale(h)));
    }
    w.experts_used = c.n_experts_used;
  }
  if (c.post_norms) {
    w.has_post_norms = true;
    w.post_attn_norm = NormOnes(c.dim, TensorSeed(seed, layer, 9));
    w.post_ffw_norm = NormOnes(c.dim, TensorSeed(seed, layer, 10));
  }
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return w;
}

}  // namespace specline::cuda
