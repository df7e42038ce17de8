// K-quant weights against Q8_K activations (q8k_activation.h), the way
// llama.cpp's *_K x Q8_K dot products work: a 256-element super-block is
// summed in int32 with its sub-block scales applied by integer multiply-add,
// and converted to float once. Every K-quant element is
//
//   w[k] = d * sc[k / 16] * q[k] - dm * mn[k / 16]        (q unsigned, 0..63)
//
// with small integer sub-block scales sc (-128..127) and offsets mn per 16
// elements (Q4_K/Q5_K repeat each 32-element value twice), so one
// super-block's dot with an activation block (scale dx, levels xq, per-16
// sums bsums) is
//
//   lanes[l] = sum over the 8 units j of
//                sum_{k = 4l..4l+3} sc[2j + l/4] * q[32j + k] * xq[32j + k]
//   mins[l]  = bsums[2l] * mn[2l] + bsums[2l + 1] * mn[2l + 1]
//   acc      = fma(d * dx, lanes, acc);  acc = fma(-dm * dx, mins, acc)
//
// (Q6_K and Q3_K, whose offset is a multiple of the scale itself, fold the
// mins into lanes in int32 and take one fma). All sums are exact int32
// (|lanes| < 2^27); the float work is per super-block, and a row's result
// is Reduce(acc). GEMV, the few-rows kernel and the prefill loop run this
// same sequence per (weight row, activation row): identical bits for any m
// and any thread count, and the portable path computes the same integers
// and the same roundings.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/q8k_activation.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/weight_units.h"

namespace specline::kernels::detail {

// What a K-quant super-block shares: per-16 scales and offsets and the two
// float factors. With AVX2 the scales are kept as int16, the even
// sub-blocks' in the low 128-bit lane and the odd ones' in the high lane,
// so unit j's multipliers (sc[2j] for its first 16 elements, sc[2j + 1] for
// the rest) are one in-lane shuffle.
struct KHeader {
#if SPECLINE_KERNELS_AVX2
  __m256i scales;
  __m128i mn;  // int8, per 16 elements
#else
  int8_t sc[16];
  int8_t mn[16];
#endif
  float d;
  float dm;  // the offsets' factor (the scale d itself for Q6_K and Q3_K)
};

#if SPECLINE_KERNELS_AVX2
// Sets h from 16 int8 scales and offsets, in element order.
inline void SetScales(__m128i sc, __m128i mn, KHeader* h) {
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  h->scales = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, even_odd));
  h->mn = mn;
}
inline __m256i Load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i Mask8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
#endif

template <DType T>
struct KUnits;

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and minimums (ggml's
// get_scale_min_k4 for all eight at once), each repeated for both
// 16-element halves. Unit j's levels are the low (j even) or high nibbles
// of qs[32 * (j / 2) ..], plus for Q5_K bit j of qh[l] as 16.
template <bool kFifthBit>
struct KScaleMin {
  static constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  static constexpr int kMinShift = 0;
  static constexpr bool kMinIsScale = false;  // mins have their own factor dmin
  template <int j>
  static Bytes32 Levels(const uint8_t* p) {
#if SPECLINE_KERNELS_AVX2
    const __m256i qs = Load32(p + (kFifthBit ? 48 : 16) + 32 * (j >> 1));
    __m256i q = _mm256_and_si256((j & 1) ? _mm256_srli_epi16(qs, 4) : qs, Mask8(0x0f));
    if constexpr (kFifthBit) {
      const __m256i bit = _mm256_and_si256(Load32(p + 16), Mask8(1 << j));
      q = _mm256_or_si256(q, j <= 4 ? _mm256_slli_epi16(bit, 4 - j) : _mm256_srli_epi16(bit, j - 4));
    }
    return q;
#else
    Bytes32 v;
    for (int l = 0; l < 32; ++l) {
      int q = (p[(kFifthBit ? 48 : 16) + 32 * (j >> 1) + l] >> (4 * (j & 1))) & 0x0f;
      if constexpr (kFifthBit) q |= ((p[16 + l] >> j) & 1) << 4;
      v.b[l] = static_cast<int8_t>(q);
    }
    return v;
#endif
  }
  static void LoadHeader(const uint8_t* p, KHeader* h) {
    uint32_t a[3];
    std::memcpy(a, p + 4, 12);
    constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    // Sub-blocks 0..3 keep the low 6 bits of bytes 0..3 (scales) and 4..7
    // (mins); 4..7 take the nibbles of bytes 8..11 plus the top 2 bits of
    // bytes 0..3 (scales) and 4..7 (mins).
    const uint32_t sc[2] = {a[0] & kLow6, (a[2] & kLow4) | (((a[0] >> 6) & kLow2) << 4)};
    const uint32_t mn[2] = {a[1] & kLow6, ((a[2] >> 4) & kLow4) | (((a[1] >> 6) & kLow2) << 4)};
#if SPECLINE_KERNELS_AVX2
    uint64_t s8, m8;
    std::memcpy(&s8, sc, 8);
    std::memcpy(&m8, mn, 8);
    const __m128i s = _mm_cvtsi64_si128(static_cast<int64_t>(s8));
    const __m128i m = _mm_cvtsi64_si128(static_cast<int64_t>(m8));
    SetScales(_mm_unpacklo_epi8(s, s), _mm_unpacklo_epi8(m, m), h);
#else
    for (int i = 0; i < 16; ++i) {
      const int j = i >> 1;
      h->sc[i] = static_cast<int8_t>((sc[j >> 2] >> (8 * (j & 3))) & 0xff);
      h->mn[i] = static_cast<int8_t>((mn[j >> 2] >> (8 * (j & 3))) & 0xff);
    }
#endif
    HalfPair(p, &h->d, &h->dm);
  }
};

template <>
struct KUnits<DType::kQ4_K> : KScaleMin<false> {};
template <>
struct KUnits<DType::kQ5_K> : KScaleMin<true> {};

// Q6_K: d * s * (q - 32) with int8 s per 16: mn = 32 * s. Unit j = 4 * half
// + k: the low (k < 2) or high nibbles of ql[64 * half + 32 * (k & 1) ..]
// and bits 2k, 2k + 1 of qh[32 * half ..] as 16 and 32.
template <>
struct KUnits<DType::kQ6_K> {
  static constexpr int kBlockBytes = 210;
  static constexpr int kMinShift = 5;
  static constexpr bool kMinIsScale = true;
  template <int j>
  static Bytes32 Levels(const uint8_t* p) {
#if SPECLINE_KERNELS_AVX2
    constexpr int half = j >> 2, k = j & 3;
    const __m256i ql = Load32(p + 64 * half + 32 * (k & 1));
    const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), Mask8(0x0f));
    const __m256i hb = _mm256_and_si256(Load32(p + 128 + 32 * half), Mask8(3 << (2 * k)));
    __m256i hi;
    if constexpr (k < 2) {
      hi = _mm256_slli_epi16(hb, 4 - 2 * k);
    } else if constexpr (k == 2) {
      hi = hb;
    } else {
      hi = _mm256_srli_epi16(hb, 2);
    }
    return _mm256_or_si256(lo, hi);
#else
    constexpr int half = j >> 2, k = j & 3;
    Bytes32 v;
    for (int l = 0; l < 32; ++l) {
      const int lo = (p[64 * half + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0f;
      const int hi = (p[128 + 32 * half + l] >> (2 * k)) & 3;
      v.b[l] = static_cast<int8_t>(lo | (hi << 4));
    }
    return v;
#endif
  }
  static void LoadHeader(const uint8_t* p, KHeader* h) {
#if SPECLINE_KERNELS_AVX2
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    SetScales(sc, sc, h);
#else
    std::memcpy(h->sc, p + 192, 16);
    std::memcpy(h->mn, p + 192, 16);
#endif
    h->d = h->dm = HalfToFloat(LoadU16(p + 208));
  }
};

// Q3_K: d * (s - 32) * (q - 4) with q = 2 low bits (shift 2 * (j & 3)) of
// qs[32 * (j >> 2) ..] + 4 * bit j of hmask[l].
template <>
struct KUnits<DType::kQ3_K> {
  static constexpr int kBlockBytes = 110;
  static constexpr int kMinShift = 2;
  static constexpr bool kMinIsScale = true;
  template <int j>
  static Bytes32 Levels(const uint8_t* p) {
#if SPECLINE_KERNELS_AVX2
    const __m256i qs = Load32(p + 32 + 32 * (j >> 2));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * (j & 3)), Mask8(3));
    const __m256i bit = _mm256_and_si256(Load32(p), Mask8(1 << j));
    return _mm256_or_si256(lo, j <= 2 ? _mm256_slli_epi16(bit, 2 - j) : _mm256_srli_epi16(bit, j - 2));
#else
    Bytes32 v;
    for (int l = 0; l < 32; ++l) {
      v.b[l] = static_cast<int8_t>(((p[32 + 32 * (j >> 2) + l] >> (2 * (j & 3))) & 3) |
                                   (((p[l] >> j) & 1) << 2));
    }
    return v;
#endif
  }
  static void LoadHeader(const uint8_t* p, KHeader* h) {
#if SPECLINE_KERNELS_AVX2
    // ScaleQ3K for all 16: low nibbles of bytes 0..7 then their high
    // nibbles, plus 2 bits of byte 8 + (i & 3) at shift 2 * (i >> 2) as 16.
    uint32_t a;
    std::memcpy(&a, p + 96 + 8, 4);
    constexpr uint32_t kLow2 = 0x03030303;
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 96));
    const __m128i lo = _mm_and_si128(_mm_unpacklo_epi64(v, _mm_srli_epi16(v, 4)), _mm_set1_epi8(0x0f));
    const __m128i hi = _mm_setr_epi32(static_cast<int>(a & kLow2), static_cast<int>((a >> 2) & kLow2),
                                      static_cast<int>((a >> 4) & kLow2), static_cast<int>((a >> 6) & kLow2));
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    SetScales(sc, sc, h);
#else
    for (int i = 0; i < 16; ++i) h->sc[i] = h->mn[i] = static_cast<int8_t>(ScaleQ3K(i, p + 96));
#endif
    h->d = h->dm = HalfToFloat(LoadU16(p + 108));
  }
};

// Q2_K: per 16, byte = 4-bit min << 4 | 4-bit scale; d and dmin at 80.
// Unit j's levels are 2-bit fields (shift 2 * (j & 3)) of qs[32 * (j >> 2) ..].
template <>
struct KUnits<DType::kQ2_K> {
  static constexpr int kBlockBytes = 84;
  static constexpr int kMinShift = 0;
  static constexpr bool kMinIsScale = false;
  template <int j>
  static Bytes32 Levels(const uint8_t* p) {
#if SPECLINE_KERNELS_AVX2
    return _mm256_and_si256(_mm256_srli_epi16(Load32(p + 16 + 32 * (j >> 2)), 2 * (j & 3)), Mask8(3));
#else
    Bytes32 v;
    for (int l = 0; l < 32; ++l) v.b[l] = static_cast<int8_t>((p[16 + 32 * (j >> 2) + l] >> (2 * (j & 3))) & 3);
    return v;
#endif
  }
  static void LoadHeader(const uint8_t* p, KHeader* h) {
#if SPECLINE_KERNELS_AVX2
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i low4 = _mm_set1_epi8(0x0f);
    SetScales(_mm_and_si128(b, low4), _mm_and_si128(_mm_srli_epi16(b, 4), low4), h);
#else
    for (int i = 0; i < 16; ++i) {
      h->sc[i] = static_cast<int8_t>(p[i] & 0x0f);
      h->mn[i] = static_cast<int8_t>(p[i] >> 4);
    }
#endif
    HalfPair(p + 80, &h->d, &h->dm);
  }
};

// The per-unit scale operand: unit j's int16 multipliers, sc[2j] for its
// first 16 elements (as 8 maddubs pair sums) and sc[2j + 1] for the rest.
#if SPECLINE_KERNELS_AVX2
using Scales16 = __m256i;
template <int j>
inline Scales16 UnitScales(const KHeader& h) {
  return _mm256_shuffle_epi8(h.scales, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j)));
}
#else
struct Scales16 {
  int32_t lo, hi;
};
template <int j>
inline Scales16 UnitScales(const KHeader& h) { return {h.sc[2 * j], h.sc[2 * j + 1]}; }
#endif

// 8 int32 lanes, one super-block's running sums.
#if SPECLINE_KERNELS_AVX2
using Lanes32 = __m256i;
inline Lanes32 LanesZero() { return _mm256_setzero_si256(); }
// lanes += sc * (q . x), pairwise as described at the top.
inline Lanes32 AddUnitDot(Lanes32 lanes, const Bytes32& q, const Bytes32& xq, const Scales16& s) {
  return _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), s));
}
template <int kShift>
inline Lanes32 MinLanes(const KHeader& h, const int16_t* bsums) {
  __m256i mn = _mm256_cvtepi8_epi16(h.mn);
  if constexpr (kShift > 0) mn = _mm256_slli_epi16(mn, kShift);
  return _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums)), mn);
}
inline Lanes32 LanesSub(Lanes32 a, Lanes32 b) { return _mm256_sub_epi32(a, b); }
inline Vec LanesToFloat(Lanes32 a) { return _mm256_cvtepi32_ps(a); }
#else
struct Lanes32 {
  int32_t v[8];
};
inline Lanes32 LanesZero() { return Lanes32{}; }
inline Lanes32 AddUnitDot(Lanes32 lanes, const Bytes32& q, const Bytes32& xq, const Scales16& s) {
  for (int l = 0; l < 8; ++l) {
    int32_t dot = 0;
    for (int k = 4 * l; k < 4 * l + 4; ++k) dot += int32_t{static_cast<uint8_t>(q.b[k])} * int32_t{xq.b[k]};
    lanes.v[l] += dot * (l < 4 ? s.lo : s.hi);
  }
  return lanes;
}
template <int kShift>
inline Lanes32 MinLanes(const KHeader& h, const int16_t* bsums) {
  Lanes32 r;
  for (int l = 0; l < 8; ++l) {
    r.v[l] = int32_t{bsums[2 * l]} * (int32_t{h.mn[2 * l]} * (1 << kShift)) +
             int32_t{bsums[2 * l + 1]} * (int32_t{h.mn[2 * l + 1]} * (1 << kShift));
  }
  return r;
}
inline Lanes32 LanesSub(Lanes32 a, const Lanes32& b) {
  for (int l = 0; l < 8; ++l) a.v[l] -= b.v[l];
  return a;
}
inline Vec LanesToFloat(const Lanes32& a) {
  Vec r;
  for (int l = 0; l < 8; ++l) r.v[l] = static_cast<float>(a.v[l]);
  return r;
}
#endif

// Folds one super-block's integer sums into a row's float accumulator.
template <DType T>
inline Vec FinishSuperBlock(const KHeader& h, const Q8KBlock& x, Lanes32 lanes, Vec acc) {
  using U = KUnits<T>;
  const Lanes32 mins = MinLanes<U::kMinShift>(h, x.bsums);
  if constexpr (U::kMinIsScale) {
    return VFma(VSet1(h.d * x.d), LanesToFloat(LanesSub(lanes, mins)), acc);
  } else {
    acc = VFma(VSet1(h.d * x.d), LanesToFloat(lanes), acc);
    return VFma(VSet1(-(h.dm * x.d)), LanesToFloat(mins), acc);
  }
}

constexpr bool IsKQuant(DType t) { return BlockElems(t) == 256; }

}  // namespace specline::kernels::detail
