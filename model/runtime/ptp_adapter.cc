#include "model/runtime/ptp_adapter.h"

#include <stdexcept>
#include <string>

#include "model/runtime/ptp_u_embed.h"
#include "model/runtime/weights.h"

namespace specline {
namespace {

// lora_B of a q or k projection with its output rows moved from rotate_half
// order (i, i + head_dim/2) to interleaved pairs (2i, 2i+1) within each
// head, as the base's own q/k rows are (the llama2.c / GGUF layout).
kernels::WeightMatrix InterleavedRows(const TensorInfo& t, int head_dim,
                                      std::vector<float>& storage) {
  const std::vector<float> half_order = VectorOf(t);
  const int64_t rows = t.rows(), cols = t.cols(), half = head_dim / 2;
  storage.resize(half_order.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, i = r % head_dim;
    const int64_t to = head * head_dim + 2 * (i % half) + i / half;
    std::copy_n(half_order.data() + r * cols, cols, storage.data() + to * cols);
  }
  return {DType::kF32, rows, cols, storage.data(), cols * static_cast<int64_t>(sizeof(float))};
}

}  // namespace

PtpAdapter::PtpAdapter(std::shared_ptr<const DraftHead> head) : head_(std::move(head)) {
  if (!head_) throw std::invalid_argument("PtpAdapter needs a head");
  if (head_->spec().method != DraftMethod::kPtp) {
    throw std::invalid_argument(head_->dir() + ": a " + DraftMethodName(head_->spec().method) +
                                " head is not a PTP adapter");
  }
  const DraftHeadSpec& s = head_->spec();
  const ModelConfig& c = head_->base_config();
  dim_ = c.dim;
  scale_ = static_cast<float>(s.ptp_lora_alpha / s.ptp_lora_rank);
  auto tensor = [&](const std::string& name) -> const TensorInfo& {
    const TensorInfo* t = head_->FileTensor(name);
    if (!t) throw std::invalid_argument(head_->dir() + ": tensor " + name + " is missing");
    return *t;
  };
  u_embed_ = VectorOf(tensor("u_embed.weight"));
  layers_.resize(c.n_layers);
  for (int j = 0; j < c.n_layers; ++j) {
    for (int k = 0; k < kNumLoraTargets; ++k) {
      const std::string prefix = "layers." + std::to_string(j) + "." + kPtpLoraTargets[k];
      layers_[j][k].a = MatrixOf(tensor(prefix + ".lora_A"));
      const TensorInfo& b = tensor(prefix + ".lora_B");
      layers_[j][k].b = MatrixOf(b);
      const bool qk = k == static_cast<int>(LoraTarget::kQ) || k == static_cast<int>(LoraTarget::kK);
      if (qk && c.rope_style == RopeStyle::kInterleaved) {
        layers_[j][k].b = InterleavedRows(b, c.head_dim, permuted_.emplace_back());
      }
    }
  }
  fingerprint_ = head_->Fingerprint();
}

void PtpAdapter::Embed(double u, float* out) const {
  PtpUEmbed(u, u_embed_, std::span<float>(out, dim_));
}

void PtpAdapter::Apply(int layer, LoraTarget target, std::span<const int32_t> rows,
                       const float* x, int64_t x_width, float* y, int64_t y_width,
                       kernels::ThreadPool& pool) const {
  if (rows.empty()) return;
  const Pair& p = layers_.at(layer)[static_cast<int>(target)];
  if (p.a.cols != x_width || p.b.rows != y_width) {
    throw std::invalid_argument("PtpAdapter::Apply: row widths do not match the LoRA shapes");
  }
  // Gather the auxiliary rows, two small matmuls, scatter-add: the cost is
  // O(rows * r * (in + out)), a few percent of the base projection.
  const int64_t m = static_cast<int64_t>(rows.size());
  thread_local std::vector<float> xs, mid, ys;
  xs.resize(m * x_width);
  mid.resize(m * p.a.rows);
  ys.resize(m * y_width);
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(x + int64_t{rows[i]} * x_width, x_width, xs.data() + i * x_width);
  }
  kernels::MatMul(p.a, xs.data(), m, mid.data(), pool);
  kernels::MatMul(p.b, mid.data(), m, ys.data(), pool);
  for (int64_t i = 0; i < m; ++i) {
    kernels::Axpy(scale_, ys.data() + i * y_width, y + int64_t{rows[i]} * y_width, y_width);
  }
}

}  // namespace specline
