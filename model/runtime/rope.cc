#include "model/runtime/rope.h"

#include <cmath>
#include <numbers>

namespace specline {

Rope::Rope(const ModelConfig& config) : Rope(config, /*local=*/false) {}

Rope::Rope(const ModelConfig& config, bool local)
    : head_dim_(config.head_dim),
      style_(config.rope_style),
      inv_freq_(config.RopeDim() / 2),
      rot_dim_(config.RopeDim()) {
  const int half = rot_dim_ / 2;
  const double theta =
      local && config.rope_theta_local > 0.0f ? config.rope_theta_local : config.rope_theta;
  // Linear scaling divides the position, i.e. every frequency (llama.cpp's
  // freq_scale = 1 / factor); Gemma 3 applies it to its global layers only.
  const double linear = local ? 1.0 : static_cast<double>(config.rope_linear_factor);
  // Partial rotary (Phi-4-mini): the frequencies span the rotated dims only,
  // theta^(-2i/rot_dim), as in transformers and llama.cpp's n_rot.
  for (int i = 0; i < half; ++i) {
    inv_freq_[i] = 1.0 / std::pow(theta, 2.0 * i / static_cast<double>(rot_dim_)) / linear;
  }
  if (config.longrope && !local) ApplyLongRope(config);
  if (config.llama3_scaling && !local) {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept,
    // and the band between is interpolated smoothly.
    const Llama3RopeScaling& s = *config.llama3_scaling;
    const double low_wavelen = s.original_max_position / s.low_freq_factor;
    const double high_wavelen = s.original_max_position / s.high_freq_factor;
    for (double& f : inv_freq_) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
}

// One factor set for the whole model, chosen by the context it serves (as
// llama.cpp does by n_ctx): every cached key is then rotated like every later
// query. transformers switches per forward call instead (long once the
// sequence passes original_max_position); the two agree whenever the context
// and the sequence are on the same side of it.
void Rope::ApplyLongRope(const ModelConfig& config) {
  const LongRopeScaling& s = *config.longrope;
  const std::vector<float>& f =
      config.max_seq_len > s.original_max_position ? s.long_factors : s.short_factors;
  for (size_t i = 0; i < inv_freq_.size(); ++i) inv_freq_[i] /= f[i];
  scale_ = s.attention_factor;
}

void Rope::Angles(int32_t pos, float* cos_out, float* sin_out) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = pos * inv_freq_[i];
    cos_out[i] = static_cast<float>(std::cos(angle) * scale_);
    sin_out[i] = static_cast<float>(std::sin(angle) * scale_);
  }
}

void Rope::Apply(float* x, int n_heads, const float* cos_v, const float* sin_v) const {
  const int half = rot_dim_ / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * head_dim_;
    if (style_ == RopeStyle::kInterleaved) {
      for (int i = 0; i < half; ++i) {
        const float a = head[2 * i], b = head[2 * i + 1];
        head[2 * i] = a * cos_v[i] - b * sin_v[i];
        head[2 * i + 1] = a * sin_v[i] + b * cos_v[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = head[i], b = head[i + half];
        head[i] = a * cos_v[i] - b * sin_v[i];
        head[i + half] = a * sin_v[i] + b * cos_v[i];
      }
    }
  }
}

}  // namespace specline
