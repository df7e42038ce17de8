// Elementwise and reduction kernels on fp32 vectors. Reductions (Dot,
// RmsNorm) use the canonical order of simd.h, so Dot(W row, x) equals the
// corresponding MatMul output bit for bit. The transcendental ones (Softmax,
// SwiGlu) call libm's expf per element: they touch O(hidden) or O(vocab)
// values per token, negligible next to the matmuls, and libm keeps them
// accurate to within an ulp or so, which sampling and verification rely on.
#include <cmath>
#include <limits>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specline::kernels {

using detail::kLanes;
using detail::Vec;

float Dot(const float* a, const float* b, int64_t n) {
  Vec acc = detail::VZero();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    acc = detail::VFma(detail::VLoad(a + i), detail::VLoad(b + i), acc);
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    acc = detail::VFma(detail::VLoadPartial(a + i, rest),
                       detail::VLoadPartial(b + i, rest), acc);
  }
  return detail::Reduce(acc);
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const Vec va = detail::VSet1(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    detail::VStore(y + i, detail::VFma(va, detail::VLoad(x + i), detail::VLoad(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void AddInPlace(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    detail::VStore(x + i, detail::VAdd(detail::VLoad(x + i), detail::VLoad(y + i)));
  }
  for (; i < n; ++i) x[i] += y[i];
}

void RmsNorm(const float* x, const float* weight, float eps, int64_t n,
             float* out) {
  if (n <= 0) return;
  const float mean_sq = Dot(x, x, n) / static_cast<float>(n);
  const float scale = 1.0f / std::sqrt(mean_sq + eps);
  // (x * scale) * weight, the order of the Hugging Face and llama.cpp
  // implementations, so the two round alike.
  const Vec vs = detail::VSet1(scale);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    detail::VStore(out + i, detail::VMul(detail::VMul(detail::VLoad(x + i), vs),
                                         detail::VLoad(weight + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void SwiGlu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeGluTanh(float* gate, const float* up, int64_t n) {
  // gelu with the tanh approximation (PyTorch's gelu(approximate="tanh"),
  // Gemma's "gelu_pytorch_tanh"), in float like the reference.
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float inner = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    gate[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  if (cap <= 0.0f) return;
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void Scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  if (max == -std::numeric_limits<float>::infinity()) {
    // Every logit masked: no preferred outcome, so return the uniform
    // distribution rather than NaNs from (-inf) - (-inf).
    for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / static_cast<float>(n);
    return;
  }
  double sum = 0.0;  // double: 150k-entry vocabularies sum without drift
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace specline::kernels
