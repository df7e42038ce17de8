// Rotary position embedding: frequencies (with Llama 3 scaling) and the
// rotation of q/k heads in either pairing layout.
#pragma once

#include <vector>

#include "model/model_config.h"

namespace specline {

class Rope {
 public:
  explicit Rope(const ModelConfig& config);
  // The RoPE of one kind of layer of a model with sliding-window layers
  // (Gemma): `local` layers use rope_theta_local (when set) and no scaling,
  // global ones rope_theta divided by rope_linear_factor (and Llama 3
  // scaling, if any).
  Rope(const ModelConfig& config, bool local);

  int head_dim() const { return head_dim_; }
  // Rotated leading dims of each head (head_dim unless partial rotary).
  int rot_dim() const { return rot_dim_; }

  // cos/sin for one position: rot_dim()/2 values each (at most head_dim/2),
  // scaled by the LongRoPE attention factor when there is one.
  void Angles(int32_t pos, float* cos_out, float* sin_out) const;

  // Rotates n_heads consecutive heads of x in place using precomputed
  // cos/sin of their position.
  void Apply(float* x, int n_heads, const float* cos_v, const float* sin_v) const;

 private:
  int head_dim_;
  RopeStyle style_;
  std::vector<double> inv_freq_;  // rot_dim/2
  // Appended for Phi-3: partial rotary and LongRoPE.
  void ApplyLongRope(const ModelConfig& config);
  int rot_dim_;
  double scale_ = 1.0;
};

}  // namespace specline
