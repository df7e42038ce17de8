// Decoders from each weight dtype's in-memory layout to fp32 vectors, shared
// by DequantizeRow, GEMV and the GEMM panel packer so that all three produce
// exactly the same floats. A row is decoded in "steps": 8 elements for the
// float types, one 32-element block (4 vectors) for the 32-element GGML quant
// types, and one 32-element sub-block of a 256-element super-block for the
// K-quants (kSubSteps = 8 steps per block; Decode takes the sub-block index,
// so a step still fits in 4 registers).
//
// Dequantized values:
//   Q8_0: d * q            Q4_0: d * (q - 8)            Q4_1: d * q + m
//   Q5_0: d * (q - 16)     Q5_1: d * q + m
//   Q2_K: (d * sc) * q - dmin * m        Q3_K: (d * (sc - 32)) * (q - 4h)
//   Q4_K, Q5_K: (d * sc) * q - dmin * m  Q6_K: (d * sc) * (q - 32)
// d, dmin and m are fp16 (11 significant bits) and sc, m, q small integers,
// so every product is exact in fp32 (at most 11 + 7 + 6 = 24 bits, for
// Q6_K) and the only rounding is the final add or subtract. Fused or
// unfused, in any order, the result is therefore the same, and equal to
// the `gguf` Python package's NumPy dequantizer (gguf.quants.dequantize,
// which rounds each product), bit for bit on both code paths:
// kquants_test checks it on llama-quantize output (tests/data/kquants).
// The AVX2 paths use an fma for "q * s + m" where that saves an instruction.
// GGML nibble order: byte j of a Q4/Q5 block holds element j in its low
// nibble and element j + 16 in its high nibble.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/fp16_portable.h"
#include "kernels/cpu/simd.h"
#include "kernels/dtype.h"

namespace specline::kernels::detail {

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);  // little-endian, possibly unaligned
  return v;
}

inline float HalfToFloat(uint16_t h) {
#if SPECLINE_KERNELS_AVX2
  return _cvtsh_ss(h);
#else
  return F16ToF32Portable(h);
#endif
}

template <DType T>
struct Codec;

#if SPECLINE_KERNELS_AVX2
inline __m128i Load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// (b >> shift) & mask per byte, for fields that do not cross bytes: the
// 16-bit shift moves bits of the next byte only above the mask.
inline __m128i ShiftMask8(__m128i b, int shift, int mask) {
  return _mm_and_si128(_mm_srl_epi16(b, _mm_cvtsi32_si128(shift)),
                       _mm_set1_epi8(static_cast<char>(mask)));
}

// Bytes 0-7 / 8-15 of 16 bytes, widened to int32 lanes.
inline __m256i U8Lo(__m128i b) { return _mm256_cvtepu8_epi32(b); }
inline __m256i U8Hi(__m128i b) { return _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)); }
inline __m256i I8Lo(__m128i b) { return _mm256_cvtepi8_epi32(b); }
inline __m256i I8Hi(__m128i b) { return _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)); }

// Byte i = 0x10 where bit i of the low 16 bits of x is set, else 0.
inline __m128i HighBits16(uint32_t x) {
  const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(x & 0xffff)),
                                     _mm_set_epi64x(0x0101010101010101LL, 0));
  const __m128i bits = _mm_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(b, bits), bits), _mm_set1_epi8(0x10));
}

inline Vec ToF32(__m256i q) { return _mm256_cvtepi32_ps(q); }

// q * s - m with one rounding: the product is exact (see the top), so this
// is also NumPy's round(round(q * s) - m).
inline Vec MulSub(__m256i q, Vec s, Vec neg_m) { return VFma(ToF32(q), s, neg_m); }
#endif

// Copies 32 floats into 4 vectors (the portable paths decode into arrays).
inline void ToVecs(const float* f, Vec* out) {
  for (int i = 0; i < 4; ++i) out[i] = VLoad(f + 8 * i);
}

// First n (< 8) elements of a 16-bit type, rest zero, via a zero-padded copy
// so no byte past the row is read.
template <typename C>
Vec DecodeHalfWidthPartial(const uint8_t* p, int n) {
  uint8_t buf[C::kStepBytes] = {};
  std::memcpy(buf, p, 2 * n);
  Vec v;
  C::Decode(buf, &v);
  return v;
}

template <>
struct Codec<DType::kF32> {
  static constexpr int kStepElems = 8;
  static constexpr int kStepBytes = 32;
  static void Decode(const uint8_t* p, Vec* out) {
    out[0] = VLoad(reinterpret_cast<const float*>(p));
  }
  // First n (< 8) elements starting at p, rest zero; reads only those bytes.
  static Vec DecodePartial(const uint8_t* p, int n) {
    return VLoadPartial(reinterpret_cast<const float*>(p), n);
  }
};

template <>
struct Codec<DType::kF16> {
  static constexpr int kStepElems = 8;
  static constexpr int kStepBytes = 16;
  static void Decode(const uint8_t* p, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    out[0] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
    for (int i = 0; i < 8; ++i) out[0].v[i] = HalfToFloat(LoadU16(p + 2 * i));
#endif
  }
  static Vec DecodePartial(const uint8_t* p, int n) { return DecodeHalfWidthPartial<Codec>(p, n); }
};

template <>
struct Codec<DType::kBF16> {
  static constexpr int kStepElems = 8;
  static constexpr int kStepBytes = 16;
  static void Decode(const uint8_t* p, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    out[0] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
#else
    for (int i = 0; i < 8; ++i) {
      out[0].v[i] = BitsToF32(static_cast<uint32_t>(LoadU16(p + 2 * i)) << 16);
    }
#endif
  }
  static Vec DecodePartial(const uint8_t* p, int n) { return DecodeHalfWidthPartial<Codec>(p, n); }
};

template <>
struct Codec<DType::kQ8_0> {
  static constexpr int kStepElems = 32;
  static constexpr int kStepBytes = 34;
  static void Decode(const uint8_t* p, Vec* out) {
    const float d = HalfToFloat(LoadU16(p));
    const int8_t* q = reinterpret_cast<const int8_t*>(p + 2);
#if SPECLINE_KERNELS_AVX2
    const Vec vd = VSet1(d);
    for (int i = 0; i < 4; ++i) {
      __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * i));
      out[i] = VMul(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), vd);
    }
#else
    for (int i = 0; i < 32; ++i) out[i / 8].v[i % 8] = d * static_cast<float>(q[i]);
#endif
  }
};

template <>
struct Codec<DType::kQ4_0> {
  static constexpr int kStepElems = 32;
  static constexpr int kStepBytes = 18;
  static void Decode(const uint8_t* p, Vec* out) {
    const float d = HalfToFloat(LoadU16(p));
    const uint8_t* q = p + 2;
#if SPECLINE_KERNELS_AVX2
    const Vec vd = VSet1(d);
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m128i eight = _mm_set1_epi8(8);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, nib), eight);
    __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), nib), eight);
    out[0] = VMul(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vd);
    out[1] = VMul(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vd);
    out[2] = VMul(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vd);
    out[3] = VMul(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vd);
#else
    for (int j = 0; j < 16; ++j) {
      out[j / 8].v[j % 8] = d * static_cast<float>((q[j] & 0x0f) - 8);
      out[2 + j / 8].v[j % 8] = d * static_cast<float>((q[j] >> 4) - 8);
    }
#endif
  }
};

template <>
struct Codec<DType::kQ4_1> {
  static constexpr int kStepElems = 32;
  static constexpr int kStepBytes = 20;
  static void Decode(const uint8_t* p, Vec* out) {
    const float d = HalfToFloat(LoadU16(p));
    const float m = HalfToFloat(LoadU16(p + 2));
    const uint8_t* q = p + 4;
#if SPECLINE_KERNELS_AVX2
    const Vec vd = VSet1(d);
    const Vec vm = VSet1(m);
    const __m128i nib = _mm_set1_epi8(0x0f);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    __m128i lo = _mm_and_si128(bytes, nib);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nib);
    out[0] = VFma(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), vd, vm);
    out[1] = VFma(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), vd, vm);
    out[2] = VFma(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), vd, vm);
    out[3] = VFma(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), vd, vm);
#else
    for (int j = 0; j < 16; ++j) {
      out[j / 8].v[j % 8] = std::fma(static_cast<float>(q[j] & 0x0f), d, m);
      out[2 + j / 8].v[j % 8] = std::fma(static_cast<float>(q[j] >> 4), d, m);
    }
#endif
  }
};

// --- Q5_0 / Q5_1: 32 elements, 4 low bits in nibbles, the 5th bit of
// element j in bit j of the little-endian u32 qh.

template <>
struct Codec<DType::kQ5_0> {
  static constexpr int kStepElems = 32;
  static constexpr int kStepBytes = 22;
  static void DecodeScalar(const uint8_t* p, float* out) {
    const float d = HalfToFloat(LoadU16(p));
    uint32_t qh;
    std::memcpy(&qh, p + 2, 4);
    const uint8_t* qs = p + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      out[j] = d * static_cast<float>(lo - 16);
      out[j + 16] = d * static_cast<float>(hi - 16);
    }
  }
  static void Decode(const uint8_t* p, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    const Vec vd = VSet1(HalfToFloat(LoadU16(p)));
    uint32_t qh;
    std::memcpy(&qh, p + 2, 4);
    const __m128i qs = Load16(p + 6);
    for (int h = 0; h < 2; ++h) {
      const __m128i nib = ShiftMask8(qs, 4 * h, 0x0f);
      const __m128i q = _mm_sub_epi8(_mm_or_si128(nib, HighBits16(qh >> (16 * h))),
                                     _mm_set1_epi8(16));
      out[2 * h] = VMul(vd, ToF32(I8Lo(q)));
      out[2 * h + 1] = VMul(vd, ToF32(I8Hi(q)));
    }
#else
    float f[32];
    DecodeScalar(p, f);
    ToVecs(f, out);
#endif
  }
};

template <>
struct Codec<DType::kQ5_1> {
  static constexpr int kStepElems = 32;
  static constexpr int kStepBytes = 24;
  static void DecodeScalar(const uint8_t* p, float* out) {
    const float d = HalfToFloat(LoadU16(p));
    const float m = HalfToFloat(LoadU16(p + 2));
    uint32_t qh;
    std::memcpy(&qh, p + 4, 4);
    const uint8_t* qs = p + 8;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      out[j] = d * static_cast<float>(lo) + m;
      out[j + 16] = d * static_cast<float>(hi) + m;
    }
  }
  static void Decode(const uint8_t* p, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    const Vec vd = VSet1(HalfToFloat(LoadU16(p)));
    const Vec vm = VSet1(HalfToFloat(LoadU16(p + 2)));
    uint32_t qh;
    std::memcpy(&qh, p + 4, 4);
    const __m128i qs = Load16(p + 8);
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_or_si128(ShiftMask8(qs, 4 * h, 0x0f), HighBits16(qh >> (16 * h)));
      out[2 * h] = VFma(ToF32(U8Lo(q)), vd, vm);
      out[2 * h + 1] = VFma(ToF32(U8Hi(q)), vd, vm);
    }
#else
    float f[32];
    DecodeScalar(p, f);
    ToVecs(f, out);
#endif
  }
};

// --- K-quants: a 256-element super-block decoded one 32-element sub-block
// (step) at a time; Decode(block, sub, out) with sub in [0, 8).

// Q4_K/Q5_K 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K 6-bit scale i (of 16), minus 32.
inline int ScaleQ3K(int i, const uint8_t* s) {
  const int lo = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
  const int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Q2_K: 16 sub-blocks of 16, byte sc = 4-bit min << 4 | 4-bit scale. Step
// j's 32 elements are 2-bit fields (shift 2 * (j % 4)) of qs[32 * (j / 4)..].
template <>
struct Codec<DType::kQ2_K> {
  static constexpr int kStepElems = 32;
  static constexpr int kSubSteps = 8;
  static constexpr int kBlockBytes = 84;
  static void DecodeScalar(const uint8_t* p, int j, float* out) {
    const float d = HalfToFloat(LoadU16(p + 80));
    const float dmin = HalfToFloat(LoadU16(p + 82));
    const uint8_t* q = p + 16 + 32 * (j >> 2);
    const int shift = 2 * (j & 3);
    for (int h = 0; h < 2; ++h) {
      const int sc = p[2 * j + h];
      const float dl = d * static_cast<float>(sc & 0x0f);
      const float ml = dmin * static_cast<float>(sc >> 4);
      for (int l = 0; l < 16; ++l) {
        const int v = (q[16 * h + l] >> shift) & 3;
        out[16 * h + l] = dl * static_cast<float>(v) - ml;
      }
    }
  }
  static void Decode(const uint8_t* p, int j, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    const float d = HalfToFloat(LoadU16(p + 80));
    const float dmin = HalfToFloat(LoadU16(p + 82));
    const uint8_t* q = p + 16 + 32 * (j >> 2);
    const int shift = 2 * (j & 3);
    for (int h = 0; h < 2; ++h) {
      const int sc = p[2 * j + h];
      const Vec dl = VSet1(d * static_cast<float>(sc & 0x0f));
      const Vec ml = VSet1(-(dmin * static_cast<float>(sc >> 4)));
      const __m128i v = ShiftMask8(Load16(q + 16 * h), shift, 3);
      out[2 * h] = MulSub(U8Lo(v), dl, ml);
      out[2 * h + 1] = MulSub(U8Hi(v), dl, ml);
    }
#else
    float f[32];
    DecodeScalar(p, j, f);
    ToVecs(f, out);
#endif
  }
};

// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales; q = 2 low bits (as
// Q2_K) minus 4 unless element l's bit j of hmask[l % 32] is set.
template <>
struct Codec<DType::kQ3_K> {
  static constexpr int kStepElems = 32;
  static constexpr int kSubSteps = 8;
  static constexpr int kBlockBytes = 110;
  static void DecodeScalar(const uint8_t* p, int j, float* out) {
    const float d = HalfToFloat(LoadU16(p + 108));
    const uint8_t* q = p + 32 + 32 * (j >> 2);
    const int shift = 2 * (j & 3);
    for (int h = 0; h < 2; ++h) {
      const float dl = d * static_cast<float>(ScaleQ3K(2 * j + h, p + 96));
      for (int l = 16 * h; l < 16 * h + 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - (((p[l] >> j) & 1) ? 0 : 4);
        out[l] = dl * static_cast<float>(v);
      }
    }
  }
  static void Decode(const uint8_t* p, int j, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    const float d = HalfToFloat(LoadU16(p + 108));
    const uint8_t* q = p + 32 + 32 * (j >> 2);
    const int shift = 2 * (j & 3);
    for (int h = 0; h < 2; ++h) {
      const Vec dl = VSet1(d * static_cast<float>(ScaleQ3K(2 * j + h, p + 96)));
      const __m128i lo = ShiftMask8(Load16(q + 16 * h), shift, 3);
      const __m128i hb = ShiftMask8(Load16(p + 16 * h), j, 1);
      // lo - 4 * (1 - hb) = (lo | hb << 2) - 4, in [-4, 3]
      const __m128i v = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hb, 2)), _mm_set1_epi8(4));
      out[2 * h] = VMul(dl, ToF32(I8Lo(v)));
      out[2 * h + 1] = VMul(dl, ToF32(I8Hi(v)));
    }
#else
    float f[32];
    DecodeScalar(p, j, f);
    ToVecs(f, out);
#endif
  }
};

// Q4_K: 8 sub-blocks of 32; sub-block j is the low (j even) or high nibble
// of qs[32 * (j / 2)..].
template <>
struct Codec<DType::kQ4_K> {
  static constexpr int kStepElems = 32;
  static constexpr int kSubSteps = 8;
  static constexpr int kBlockBytes = 144;
  static void DecodeScalar(const uint8_t* p, int j, float* out) {
    int sc, m;
    ScaleMinK4(j, p + 4, &sc, &m);
    const float dl = HalfToFloat(LoadU16(p)) * static_cast<float>(sc);
    const float ml = HalfToFloat(LoadU16(p + 2)) * static_cast<float>(m);
    const uint8_t* q = p + 16 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    for (int l = 0; l < 32; ++l) {
      out[l] = dl * static_cast<float>((q[l] >> shift) & 0x0f) - ml;
    }
  }
  static void Decode(const uint8_t* p, int j, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    int sc, m;
    ScaleMinK4(j, p + 4, &sc, &m);
    const Vec dl = VSet1(HalfToFloat(LoadU16(p)) * static_cast<float>(sc));
    const Vec ml = VSet1(-(HalfToFloat(LoadU16(p + 2)) * static_cast<float>(m)));
    const uint8_t* q = p + 16 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    for (int h = 0; h < 2; ++h) {
      const __m128i v = ShiftMask8(Load16(q + 16 * h), shift, 0x0f);
      out[2 * h] = MulSub(U8Lo(v), dl, ml);
      out[2 * h + 1] = MulSub(U8Hi(v), dl, ml);
    }
#else
    float f[32];
    DecodeScalar(p, j, f);
    ToVecs(f, out);
#endif
  }
};

// Q5_K: Q4_K plus a 5th bit: bit j of qh[l] for element l of sub-block j.
template <>
struct Codec<DType::kQ5_K> {
  static constexpr int kStepElems = 32;
  static constexpr int kSubSteps = 8;
  static constexpr int kBlockBytes = 176;
  static void DecodeScalar(const uint8_t* p, int j, float* out) {
    int sc, m;
    ScaleMinK4(j, p + 4, &sc, &m);
    const float dl = HalfToFloat(LoadU16(p)) * static_cast<float>(sc);
    const float ml = HalfToFloat(LoadU16(p + 2)) * static_cast<float>(m);
    const uint8_t* qh = p + 16;
    const uint8_t* q = p + 48 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0x0f) | (((qh[l] >> j) & 1) << 4);
      out[l] = dl * static_cast<float>(v) - ml;
    }
  }
  static void Decode(const uint8_t* p, int j, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    int sc, m;
    ScaleMinK4(j, p + 4, &sc, &m);
    const Vec dl = VSet1(HalfToFloat(LoadU16(p)) * static_cast<float>(sc));
    const Vec ml = VSet1(-(HalfToFloat(LoadU16(p + 2)) * static_cast<float>(m)));
    const uint8_t* qh = p + 16;
    const uint8_t* q = p + 48 + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    for (int h = 0; h < 2; ++h) {
      const __m128i lo = ShiftMask8(Load16(q + 16 * h), shift, 0x0f);
      const __m128i hb = ShiftMask8(Load16(qh + 16 * h), j, 1);
      const __m128i v = _mm_or_si128(lo, _mm_slli_epi16(hb, 4));
      out[2 * h] = MulSub(U8Lo(v), dl, ml);
      out[2 * h + 1] = MulSub(U8Hi(v), dl, ml);
    }
#else
    float f[32];
    DecodeScalar(p, j, f);
    ToVecs(f, out);
#endif
  }
};

// Q6_K: 16 sub-blocks of 16 with int8 scales. In half H = j / 4, step
// k = j % 4 takes the low (k < 2) or high nibble of ql[64 H + 32 (k % 2)..]
// and bits 2k..2k+1 of qh[32 H..] as bits 4-5; q - 32.
template <>
struct Codec<DType::kQ6_K> {
  static constexpr int kStepElems = 32;
  static constexpr int kSubSteps = 8;
  static constexpr int kBlockBytes = 210;
  static void DecodeScalar(const uint8_t* p, int j, float* out) {
    const float d = HalfToFloat(LoadU16(p + 208));
    const int k = j & 3;
    const uint8_t* ql = p + 64 * (j >> 2) + 32 * (k & 1);
    const uint8_t* qh = p + 128 + 32 * (j >> 2);
    const int8_t* scales = reinterpret_cast<const int8_t*>(p + 192);
    const int lshift = 4 * (k >> 1);
    for (int h = 0; h < 2; ++h) {
      const float dl = d * static_cast<float>(scales[2 * j + h]);
      for (int l = 16 * h; l < 16 * h + 16; ++l) {
        const int v = (((ql[l] >> lshift) & 0x0f) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        out[l] = dl * static_cast<float>(v);
      }
    }
  }
  static void Decode(const uint8_t* p, int j, Vec* out) {
#if SPECLINE_KERNELS_AVX2
    const float d = HalfToFloat(LoadU16(p + 208));
    const int k = j & 3;
    const uint8_t* ql = p + 64 * (j >> 2) + 32 * (k & 1);
    const uint8_t* qh = p + 128 + 32 * (j >> 2);
    const int8_t* scales = reinterpret_cast<const int8_t*>(p + 192);
    const int lshift = 4 * (k >> 1);
    for (int h = 0; h < 2; ++h) {
      const Vec dl = VSet1(d * static_cast<float>(scales[2 * j + h]));
      const __m128i lo = ShiftMask8(Load16(ql + 16 * h), lshift, 0x0f);
      const __m128i hi = ShiftMask8(Load16(qh + 16 * h), 2 * k, 3);
      const __m128i v = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
      out[2 * h] = VMul(dl, ToF32(I8Lo(v)));
      out[2 * h + 1] = VMul(dl, ToF32(I8Hi(v)));
    }
#else
    float f[32];
    DecodeScalar(p, j, f);
    ToVecs(f, out);
#endif
  }
};

// Steps per stored block: kSubSteps for the K-quants, else 1.
template <typename C>
constexpr int SubStepsOf() {
  if constexpr (requires { C::kSubSteps; }) {
    return C::kSubSteps;
  } else {
    return 1;
  }
}
template <DType T>
constexpr int kSubSteps = SubStepsOf<Codec<T>>();

// Bytes of one stored block (kSubSteps steps).
template <DType T>
constexpr int64_t BlockBytesOf() {
  if constexpr (kSubSteps<T> == 1) {
    return Codec<T>::kStepBytes;
  } else {
    return Codec<T>::kBlockBytes;
  }
}

// Decodes step `sub` of the block at p.
template <DType T>
inline void DecodeStep(const uint8_t* p, int sub, Vec* out) {
  if constexpr (kSubSteps<T> == 1) {
    Codec<T>::Decode(p, out);
  } else {
    Codec<T>::Decode(p, sub, out);
  }
}

// True for the types whose rows may end in a partial step (any cols).
template <DType T>
constexpr bool kHasPartialSteps = Codec<T>::kStepElems == 8;

// Decodes the first n elements of a row into dst (n a multiple of the block
// size for quant types).
template <DType T>
void DecodeRow(const uint8_t* src, int64_t n, float* dst) {
  using C = Codec<T>;
  constexpr int kVecs = C::kStepElems / kLanes;
  constexpr int kSub = kSubSteps<T>;
  const int64_t blocks = n / (C::kStepElems * kSub);
  Vec v[kVecs];
  for (int64_t b = 0; b < blocks; ++b) {
    for (int j = 0; j < kSub; ++j) {
      DecodeStep<T>(src + b * BlockBytesOf<T>(), j, v);
      float* out = dst + (b * kSub + j) * C::kStepElems;
      for (int i = 0; i < kVecs; ++i) VStore(out + i * kLanes, v[i]);
    }
  }
  if constexpr (kHasPartialSteps<T>) {
    const int rest = static_cast<int>(n - blocks * C::kStepElems);
    if (rest > 0) {
      VStorePartial(dst + blocks * C::kStepElems,
                    C::DecodePartial(src + blocks * C::kStepBytes, rest), rest);
    }
  }
}

}  // namespace specline::kernels::detail
