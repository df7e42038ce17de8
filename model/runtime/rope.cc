#include "model/runtime/rope.h"

#include <cmath>
#include <numbers>

namespace specline {

Rope::Rope(const ModelConfig& config) : Rope(config, /*local=*/false) {}

Rope::Rope(const ModelConfig& config, bool local)
    : head_dim_(config.head_dim), style_(config.rope_style), inv_freq_(config.head_dim / 2) {
  const int half = head_dim_ / 2;
  const double theta =
      local && config.rope_theta_local > 0.0f ? config.rope_theta_local : config.rope_theta;
  // Linear scaling divides the position, i.e. every frequency (llama.cpp's
  // freq_scale = 1 / factor); Gemma 3 applies it to its global layers only.
  const double linear = local ? 1.0 : static_cast<double>(config.rope_linear_factor);
  for (int i = 0; i < half; ++i) {
    inv_freq_[i] = 1.0 / std::pow(theta, 2.0 * i / static_cast<double>(head_dim_)) / linear;
  }
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

void Rope::Angles(int32_t pos, float* cos_out, float* sin_out) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = pos * inv_freq_[i];
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void Rope::Apply(float* x, int n_heads, const float* cos_v, const float* sin_v) const {
  const int half = head_dim_ / 2;
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
