// A PTP adapter as the stages run it (docs/ptp.md "The model at a row"):
// auxiliary rows take u_embed(u) instead of a token embedding, and every
// targeted projection of every layer adds a low-rank term
//   y += lora_scale * B (A x)
// at those rows only. Token rows are the untouched base model, so one
// micro-batch can mix the teacher's rows (verification) with the drafter's
// (proposals), and other requests' rows, in the same matmuls.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/formats/head_file.h"
#include "model/runtime/slice_adapter.h"

namespace specline {

// kPtpLoraTargets names the projections in Projection order.
static_assert(std::size(kPtpLoraTargets) == kNumProjections);

class PtpAdapter final : public SliceAdapter {
 public:
  // `head` must be method kPtp (std::invalid_argument otherwise); it is
  // kept alive: the LoRA matrices stay in its memory map.
  explicit PtpAdapter(std::shared_ptr<const DraftHead> head);

  const HeadConfig& config() const { return head_->config(); }
  int dim() const override { return dim_; }
  // The base's RoPE layout decides the order of the q/k rows of lora_B
  // (head->base_config().rope_style).
  // DraftHead::Fingerprint(): a scheduler checks that every stage and
  // itself load the same adapter.
  uint64_t fingerprint() const override { return fingerprint_; }

  // A slot's argument is its auxiliary row's uniform u, in [0, 1].
  absl::Status CheckArg(float u) const override;
  // An auxiliary row's input is u_embed(u), not its placeholder token's.
  bool ReplacesEmbedding() const override { return true; }
  // row[dim] = u_embed(u).
  void Embed(float u, float* row) const override;

  // For the rows listed in `rows` (indices into x / y): y[r] += scale *
  // B (A x[r]), with x rows of the projection's input width and y rows of
  // its output width (both dense, row-major). `layer` is global.
  void Apply(int layer, Projection target, std::span<const int32_t> rows, const float* x,
             int64_t x_width, float* y, int64_t y_width) const override;

 private:
  // Dequantised once: an adapter is small, and the few auxiliary rows of a
  // call make thread-pool matmuls cost more in dispatch than in arithmetic.
  struct Pair {
    std::vector<float> a, b;  // [r, in], [out, r], row-major
    int64_t in = 0, out = 0;
  };
  std::shared_ptr<const DraftHead> head_;
  int dim_ = 0;
  float scale_ = 0;
  std::vector<float> u_embed_;  // [3, dim]
  std::vector<std::array<Pair, kNumProjections>> layers_;
  int rank_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace specline
