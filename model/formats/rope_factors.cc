#include "model/formats/rope_factors.h"

#include <algorithm>
#include <cmath>

namespace specline {

namespace {

double Wavelength(int i, double theta, int head_dim) {
  double freq = 1.0 / std::pow(theta, 2.0 * i / head_dim);
  return 2.0 * M_PI / freq;
}

}  // namespace

std::vector<float> Llama3RopeFactors(const Llama3RopeScaling& s, float theta,
                                     int head_dim) {
  const double orig = s.original_max_position;
  const double low = s.low_freq_factor, high = s.high_freq_factor;
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  std::vector<float> out(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    double w = Wavelength(i, theta, head_dim);
    double r;
    if (w < high_wavelen) {
      r = 1.0;
    } else if (w > low_wavelen) {
      r = s.factor;
    } else {
      double smooth = (orig / w - low) / (high - low);
      r = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out[i] = static_cast<float>(r);
  }
  return out;
}

std::optional<Llama3RopeScaling> FitLlama3RopeScaling(
    const std::vector<float>& factors, float theta, int head_dim,
    int original_max_position) {
  if (factors.empty() || static_cast<int>(factors.size()) != head_dim / 2) {
    return std::nullopt;
  }
  Llama3RopeScaling s;
  s.original_max_position = original_max_position;
  s.factor = *std::max_element(factors.begin(), factors.end());
  if (!(std::isfinite(s.factor) && s.factor >= 1.0f)) return std::nullopt;
  // In the blend region 1/r = (1 - smooth)/factor + smooth with smooth linear
  // in orig/wavelength: smooth = (x - low) / (high - low). Two interior points
  // determine low and high; with fewer, Llama 3.1's 1 and 4 are kept.
  const double inv_factor = 1.0 / s.factor;
  std::vector<std::pair<double, double>> pts;  // (x, smooth)
  for (size_t i = 0; i < factors.size(); ++i) {
    double r = factors[i];
    if (r > 1.0 + 1e-4 && r < s.factor * (1.0 - 1e-4)) {
      double smooth = (1.0 / r - inv_factor) / (1.0 - inv_factor);
      pts.emplace_back(original_max_position / Wavelength(i, theta, head_dim),
                       smooth);
    }
  }
  if (pts.size() >= 2) {
    auto [x0, s0] = pts.front();
    auto [x1, s1] = pts.back();
    double slope = (s1 - s0) / (x1 - x0);
    if (std::isfinite(slope) && slope > 0) {
      double low = x0 - s0 / slope;
      s.low_freq_factor = static_cast<float>(low);
      s.high_freq_factor = static_cast<float>(low + 1.0 / slope);
    }
  }
  if (!(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor)) {
    return std::nullopt;
  }
  std::vector<float> again = Llama3RopeFactors(s, theta, head_dim);
  for (size_t i = 0; i < factors.size(); ++i) {
    if (std::fabs(again[i] - factors[i]) > 1e-4f * factors[i]) return std::nullopt;
  }
  return s;
}

}  // namespace specline
