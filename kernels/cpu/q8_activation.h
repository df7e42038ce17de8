// The activation side of the integer matmul path (quant_matmul.cc): each
// 32-element block of an fp32 activation row becomes one scale and 32 int8
// values, as llama.cpp's Q8_0/Q8_1 activations do, so a quantized weight row
// meets it in int8 x int8 products (AVX2 maddubs/madd) instead of being
// decoded to fp32 first.
//
//   d = max|x| / 127,  q = round-half-even(x * (1/d)),
//   ds = d * sum of q
//
// The sum lets the weight types with an offset (Q4_0's -8d, Q4_1's m, ...)
// add their offset term without a second pass. K-quant weights meet Q8_K
// activations instead (q8k_activation.h).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace specline::kernels::detail {

struct alignas(16) Q8Block {
  float d;           // scale: x ~= d * q
  float ds;          // d * (sum of q[0..31]), what a weight offset multiplies
  float pad[2];      // keeps q at offset 16
  int8_t q[32];
};
static_assert(sizeof(Q8Block) == 48);

inline void SetSums(const int32_t sum[2], Q8Block* o) {
  o->ds = o->d * static_cast<float>(sum[0] + sum[1]);
}

// Quantizes n (a multiple of 32) floats into n / 32 blocks. Both paths give
// the same bits: a max of absolute values, one division, one exactly rounded
// multiply and a round-half-even per element.
inline void QuantizeQ8(const float* x, int64_t n, Q8Block* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    Q8Block& o = out[b];
#if SPECLINE_KERNELS_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float max_abs = _mm_cvtss_f32(m4);
    o.d = max_abs / 127.0f;
    const __m256 id = _mm256_set1_ps(o.d != 0.0f ? 1.0f / o.d : 0.0f);
    __m256i q32[4];
    for (int i = 0; i < 4; ++i) {
      q32[i] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // Sums of each half's 16 int32 values, then pack to int8 in element order.
    int32_t sum[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i s = _mm256_add_epi32(q32[2 * h], q32[2 * h + 1]);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
      sum[h] = _mm_cvtsi128_si32(s4);
    }
    SetSums(sum, &o);
    const __m256i p16a = _mm256_packs_epi32(q32[0], q32[1]);  // lane-interleaved
    const __m256i p16b = _mm256_packs_epi32(q32[2], q32[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    // packs works within 128-bit lanes: restore element order.
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q), p8);
#else
    float max_abs = 0.0f;
    for (int i = 0; i < 32; ++i) max_abs = std::fmax(max_abs, std::fabs(xb[i]));
    o.d = max_abs / 127.0f;
    const float id = o.d != 0.0f ? 1.0f / o.d : 0.0f;
    int32_t sum[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * id));
      o.q[i] = static_cast<int8_t>(q);
      sum[i / 16] += q;
    }
    SetSums(sum, &o);
#endif
  }
}

}  // namespace specline::kernels::detail
