// The 8-lane float vector the CPU kernels are written in. On x86-64-v3 it is
// an AVX2 register; elsewhere it is a plain array with the same lane
// semantics, so the portable build compiles the very same kernel code and
// produces the same bits (every operation below is exactly rounded, and fma
// is a true fused multiply-add on both paths).
//
// The canonical reduction used by Dot, GEMV and GEMM: lane l accumulates the
// products of elements k = l (mod 8) in increasing k with fma, and the lanes
// are summed by the fixed tree in Reduce(). Every kernel that reduces over
// the input dimension follows it, which is why MatMul gives identical bits
// for m = 1 and m > 1 and for every thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SPECLINE_KERNELS_AVX2 1
#include <immintrin.h>
#else
#define SPECLINE_KERNELS_AVX2 0
#endif

namespace specline::kernels::detail {

constexpr int kLanes = 8;

#if SPECLINE_KERNELS_AVX2

using Vec = __m256;

inline Vec VZero() { return _mm256_setzero_ps(); }
inline Vec VSet1(float a) { return _mm256_set1_ps(a); }
inline Vec VLoad(const float* p) { return _mm256_loadu_ps(p); }
inline void VStore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec VAdd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec VMul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec VFma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }

// Mask selecting the first n (0..8) lanes.
inline __m256i LaneMask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Loads the first n lanes and zeroes the rest, without touching memory past
// p + n (the weight rows are memory-mapped; the next byte may not exist).
inline Vec VLoadPartial(const float* p, int n) {
  return _mm256_maskload_ps(p, LaneMask(n));
}

inline void VStorePartial(float* p, Vec v, int n) {
  _mm256_maskstore_ps(p, LaneMask(n), v);
}

inline float Reduce(Vec v) {
  // s4[i] = v[i] + v[i+4]; s2[i] = s4[i] + s4[i+2]; s2[0] + s2[1].
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

#else  // portable

struct Vec {
  float v[kLanes];
};

inline Vec VZero() { return Vec{}; }
inline Vec VSet1(float a) {
  Vec r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = a;
  return r;
}
inline Vec VLoad(const float* p) {
  Vec r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
inline void VStore(float* p, Vec v) { std::memcpy(p, v.v, sizeof v.v); }
inline Vec VAdd(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] += b.v[i];
  return a;
}
inline Vec VMul(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] *= b.v[i];
  return a;
}
inline Vec VFma(Vec a, Vec b, Vec c) {
  for (int i = 0; i < kLanes; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
  return c;
}
inline Vec VLoadPartial(const float* p, int n) {
  Vec r{};
  for (int i = 0; i < n; ++i) r.v[i] = p[i];
  return r;
}
inline void VStorePartial(float* p, Vec v, int n) {
  for (int i = 0; i < n; ++i) p[i] = v.v[i];
}
inline float Reduce(Vec v) {
  float s4[4], s2[2];
  for (int i = 0; i < 4; ++i) s4[i] = v.v[i] + v.v[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

#endif

}  // namespace specline::kernels::detail
