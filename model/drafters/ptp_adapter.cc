#include "model/drafters/ptp_adapter.h"

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

#include "model/drafters/ptp_u_embed.h"
#include "model/runtime/weights.h"

namespace specline {
namespace {

// Rows of lora_B of a q or k projection moved from rotate_half order (i,
// i + head_dim/2) to interleaved pairs (2i, 2i+1) within each head, as the
// base's own q/k rows are (the llama2.c / GGUF layout; the file holds
// Hugging Face's order, docs/heads.md).
std::vector<float> InterleavedRows(const std::vector<float>& half_order, int64_t rows,
                                   int64_t cols, int head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> out(half_order.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, i = r % head_dim;
    const int64_t to = head * head_dim + 2 * (i % half) + i / half;
    std::copy_n(half_order.data() + r * cols, cols, out.data() + to * cols);
  }
  return out;
}

}  // namespace

PtpAdapter::PtpAdapter(std::shared_ptr<const DraftHead> head) : head_(std::move(head)) {
  if (!head_) throw std::invalid_argument("PtpAdapter needs a head");
  if (head_->config().method != DraftMethod::kPtp) {
    throw std::invalid_argument(head_->dir() + ": a " + DraftMethodName(head_->config().method) +
                                " head is not a PTP adapter");
  }
  const HeadConfig& s = head_->config();
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
  rank_ = s.ptp_lora_rank;
  for (int j = 0; j < c.n_layers; ++j) {
    for (int k = 0; k < kNumProjections; ++k) {
      const std::string prefix = "layers." + std::to_string(j) + "." + kPtpLoraTargets[k];
      const TensorInfo& a = tensor(prefix + ".lora_A");
      const TensorInfo& b = tensor(prefix + ".lora_B");
      Pair& p = layers_[j][k];
      p.in = a.cols();
      p.out = b.rows();
      p.a = VectorOf(a);
      p.b = VectorOf(b);
      const bool qk = k == static_cast<int>(Projection::kQ) || k == static_cast<int>(Projection::kK);
      if (qk && c.rope_style == RopeStyle::kInterleaved) {
        p.b = InterleavedRows(p.b, p.out, rank_, c.head_dim);
      }
    }
  }
  fingerprint_ = head_->Fingerprint();
}

absl::Status PtpAdapter::CheckArg(float u) const {
  if (u >= 0.0f && u <= 1.0f) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a PTP auxiliary row's u must be in [0, 1], got ", u));
}

void PtpAdapter::Embed(float u, float* row) const {
  PtpUEmbed(u, u_embed_, std::span<float>(row, dim_));
}

void PtpAdapter::Apply(int layer, Projection target, std::span<const int32_t> rows,
                       const float* x, int64_t x_width, float* y, int64_t y_width) const {
  if (rows.empty()) return;
  const Pair& p = layers_.at(layer)[static_cast<int>(target)];
  if (p.in != x_width || p.out != y_width) {
    throw std::invalid_argument("PtpAdapter::Apply: row widths do not match the LoRA shapes");
  }
  // O(rows * r * (in + out)): a few percent of the base projection.
  std::vector<float> mid(rank_);
  for (int32_t row : rows) {
    const float* xr = x + int64_t{row} * x_width;
    float* yr = y + int64_t{row} * y_width;
    for (int k = 0; k < rank_; ++k) mid[k] = kernels::Dot(p.a.data() + k * p.in, xr, p.in);
    for (int64_t o = 0; o < p.out; ++o) yr[o] += scale_ * kernels::Dot(p.b.data() + o * rank_, mid.data(), rank_);
  }
}

}  // namespace specline
