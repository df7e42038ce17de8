// The activation side of the K-quant integer path (kquant_matmul.cc): one
// scale per 256 elements, as llama.cpp's Q8_K, so a whole K-quant
// super-block meets it in int32 with the sub-block scales applied by
// integer multiply-adds, and the float work is one conversion per
// super-block instead of one per 32 elements (q8_activation.h's blocks).
//
//   d = max|x| / 127,  q = round-half-even(x * (1/d)),
//   bsums[i] = sum of q over elements 16i .. 16i + 15
//
// The per-16 sums carry the offset terms of the K-quants (their minimums,
// Q6_K's -32 and Q3_K's -4) as one more integer multiply-add per block.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace specline::kernels::detail {

struct Q8KBlock {
  float d;            // scale: x ~= d * q
  int16_t bsums[16];  // |sum| <= 16 * 127
  int8_t q[256];
};
static_assert(sizeof(Q8KBlock) == 292);

// Quantizes n (a multiple of 256) floats into n / 256 blocks. Both paths give
// the same bits: a max of absolute values, one division, one exactly rounded
// multiply and a round-half-even per element, and exact integer sums.
inline void QuantizeQ8K(const float* x, int64_t n, Q8KBlock* out) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + 256 * b;
    Q8KBlock& o = out[b];
#if SPECLINE_KERNELS_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8 * i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    o.d = _mm_cvtss_f32(m4) / 127.0f;
    const __m256 id = _mm256_set1_ps(o.d != 0.0f ? 1.0f / o.d : 0.0f);
    for (int c = 0; c < 8; ++c) {  // 32 elements at a time
      __m256i q32[4];
      for (int i = 0; i < 4; ++i) {
        q32[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 32 * c + 8 * i), id),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i s = _mm256_add_epi32(q32[2 * h], q32[2 * h + 1]);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
        o.bsums[2 * c + h] = static_cast<int16_t>(_mm_cvtsi128_si32(s4));
      }
      const __m256i p16a = _mm256_packs_epi32(q32[0], q32[1]);
      const __m256i p16b = _mm256_packs_epi32(q32[2], q32[3]);
      __m256i p8 = _mm256_packs_epi16(p16a, p16b);
      p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q + 32 * c), p8);
    }
#else
    float max_abs = 0.0f;
    for (int i = 0; i < 256; ++i) max_abs = std::fmax(max_abs, std::fabs(xb[i]));
    o.d = max_abs / 127.0f;
    const float id = o.d != 0.0f ? 1.0f / o.d : 0.0f;
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int i = 16 * s; i < 16 * s + 16; ++i) {
        const int q = static_cast<int>(std::nearbyint(xb[i] * id));
        o.q[i] = static_cast<int8_t>(q);
        sum += q;
      }
      o.bsums[s] = static_cast<int16_t>(sum);
    }
#endif
  }
}

}  // namespace specline::kernels::detail
