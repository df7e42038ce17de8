// The weight side of the integer matmul path: every quantized type is read
// as "units" of 32 consecutive elements, each a vector of 32 int8 levels
// with a per-lane float scale and float offsets:
//
//   w[k] = scale[k / 4] * q[k] + offset[k / 16]          (k = 0..31)
//
// scale is per 4-element lane so that types with 16-element sub-blocks
// (Q6_K, Q3_K, Q2_K) keep one scale per half unit. Every type but Q8_0 is
// read with unsigned levels (Q4_0's q - 8 becomes q with offset -8d), which
// AVX2's maddubs (unsigned x signed bytes) takes as they are; Q8_0's signed
// levels lend their sign to the activation first. A unit meets an
// activation block (q8_activation.h) in DotUnit:
//
//   lanes[j] = sum_{k=4j..4j+3} q[k] * xq[k]                   (exact, int32)
//   acc[j]   = fma(scale[j] * xd, lanes[j], acc[j])             (8 float lanes)
//   off      = fma(offset[h], xds[h], off)  per half h, or one fma with the
//              whole block's xds when both halves share the offset
//
// and a row's result is Reduce(acc) + off. GEMV and GEMM run this same
// sequence per (weight row, activation row), which keeps their outputs bit
// identical, and the portable path computes the same integers and the same
// roundings as the AVX2 one.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/weight_codec.h"
#include "kernels/dtype.h"

namespace specline::kernels::detail {

#if SPECLINE_KERNELS_AVX2
using Bytes32 = __m256i;
inline Bytes32 LoadBytes32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
#else
struct Bytes32 {
  int8_t b[32];
};
inline Bytes32 LoadBytes32(const void* p) {
  Bytes32 v;
  std::memcpy(v.b, p, 32);
  return v;
}
#endif

struct WeightUnit {
  Bytes32 q;        // levels: 0..63 (unsigned types) or -128..127 (Q8_0)
  Vec scale;        // per 4-element lane
  float offset;     // added to elements 0..15 (and 16..31 unless kHalves)
  float offset_hi;  // added to elements 16..31, for kHalves only
};

// How a type's units carry offsets.
enum class Offsets { kNone, kOne, kHalves };

// The int8 dot of a unit's levels with an activation block's, as 8 int32
// lane sums converted to float (exact: |sum| < 2^17). Unsigned levels go to
// maddubs as they are (pair sums <= 2 * 63 * 127 < 2^15: no saturation);
// signed ones move their sign onto x (|q| <= 128 fits the unsigned side).
template <bool kSigned>
inline Vec LaneDots(const Bytes32& wq, const Bytes32& x) {
#if SPECLINE_KERNELS_AVX2
  __m256i p16;
  if constexpr (kSigned) {
    p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(x, wq));
  } else {
    p16 = _mm256_maddubs_epi16(wq, x);
  }
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#else
  Vec r;
  for (int j = 0; j < kLanes; ++j) {
    int32_t s = 0;
    for (int k = 4 * j; k < 4 * j + 4; ++k) {
      const int32_t w = kSigned ? int32_t{wq.b[k]} : int32_t{static_cast<uint8_t>(wq.b[k])};
      s += w * int32_t{x.b[k]};
    }
    r.v[j] = static_cast<float>(s);
  }
  return r;
#endif
}

struct RowAccumulator {
  Vec acc = VZero();
  float off = 0.0f;
  float Result() const { return Reduce(acc) + off; }
};

// One unit against one activation block; xq and xd are the block's levels
// and scale, loaded once by the caller for all the rows that share them.
template <Offsets kOffsets, bool kSigned>
inline void DotUnit(const WeightUnit& u, const Q8Block& x, const Bytes32& xq, const Vec& xd,
                    RowAccumulator& r) {
  r.acc = VFma(VMul(u.scale, xd), LaneDots<kSigned>(u.q, xq), r.acc);
  if constexpr (kOffsets == Offsets::kOne) {
    r.off = std::fma(u.offset, x.ds, r.off);
  } else if constexpr (kOffsets == Offsets::kHalves) {
    r.off = std::fma(u.offset, x.ds_half[0], r.off);
    r.off = std::fma(u.offset_hi, x.ds_half[1], r.off);
  }
}

// Unit loaders, one per GGML block layout (weight_codec.h describes the
// layouts). kUnitsPerBlock units share one block of kBlockBytes bytes; what
// they share (a K-quant super-block's scales and minimums) is decoded once
// per block into a Header by LoadHeader, then Load(block, j, header) gives
// unit j. Types whose block is one unit have an empty header.
template <DType T>
struct Units;

struct UnitsBase {
  struct Header {};
  static void LoadHeader(const uint8_t* /*block*/, Header* /*h*/) {}
};

// 32 nibbles of a Q4/Q5 block in element order: byte j holds element j (low
// nibble) and element j + 16 (high nibble).
inline Bytes32 Nibbles(const uint8_t* qs) {
#if SPECLINE_KERNELS_AVX2
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
#else
  Bytes32 v;
  for (int j = 0; j < 16; ++j) {
    v.b[j] = static_cast<int8_t>(qs[j] & 0x0f);
    v.b[j + 16] = static_cast<int8_t>(qs[j] >> 4);
  }
  return v;
#endif
}

// The two consecutive fp16 values at p (a block's d and m) as floats, with
// one conversion.
inline void HalfPair(const uint8_t* p, float* a, float* b) {
#if SPECLINE_KERNELS_AVX2
  int32_t bits;
  std::memcpy(&bits, p, 4);
  const __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
  *a = _mm_cvtss_f32(v);
  *b = _mm_cvtss_f32(_mm_movehdup_ps(v));
#else
  *a = HalfToFloat(LoadU16(p));
  *b = HalfToFloat(LoadU16(p + 2));
#endif
}

// Bit k of the little-endian 32-bit word at qh, as 0x10 in byte k (the fifth
// bit of a Q5 level).
inline Bytes32 HighBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
#if SPECLINE_KERNELS_AVX2
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                       2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
#else
  Bytes32 v;
  for (int k = 0; k < 32; ++k) v.b[k] = static_cast<int8_t>(((bits >> k) & 1) << 4);
  return v;
#endif
}

inline Bytes32 AddBytes(Bytes32 a, Bytes32 b) {
#if SPECLINE_KERNELS_AVX2
  return _mm256_add_epi8(a, b);
#else
  for (int k = 0; k < 32; ++k) a.b[k] = static_cast<int8_t>(a.b[k] + b.b[k]);
  return a;
#endif
}

template <>
struct Units<DType::kQ8_0> : UnitsBase {
  static constexpr Offsets kOffsets = Offsets::kNone;
  static constexpr bool kSigned = true;
  static constexpr int kUnitsPerBlock = 1;
  static constexpr int kBlockBytes = 34;
  static void Load(const uint8_t* p, int /*unit*/, const Header&, WeightUnit* u) {
    u->q = LoadBytes32(p + 2);
    u->scale = VSet1(HalfToFloat(LoadU16(p)));
  }
};

// Q4_0, Q4_1, Q5_0, Q5_1: one 32-element block is one unit. The block is
// fp16 d, then fp16 m for the "_1" types, then (Q5) 32 fifth bits, then 16
// bytes of nibbles. "_0" types are d * (q - 2^(bits-1)), read as d * q with
// offset -2^(bits-1) * d; "_1" types are d * q + m.
template <bool kMin, bool kFifthBit>
struct SmallBlockUnits : UnitsBase {
  static constexpr Offsets kOffsets = Offsets::kOne;
  static constexpr bool kSigned = false;
  static constexpr int kUnitsPerBlock = 1;
  static constexpr int kHighBits = kMin ? 4 : 2;  // where qh (or the nibbles) start
  static constexpr int kNibbles = kHighBits + (kFifthBit ? 4 : 0);
  static constexpr int kBlockBytes = kNibbles + 16;
  static void Load(const uint8_t* p, int /*unit*/, const Header&, WeightUnit* u) {
    float d, m;
    if constexpr (kMin) {
      HalfPair(p, &d, &m);
    } else {
      d = HalfToFloat(LoadU16(p));
      m = (kFifthBit ? -16.0f : -8.0f) * d;
    }
    Bytes32 q = Nibbles(p + kNibbles);
    if constexpr (kFifthBit) q = AddBytes(q, HighBits(p + kHighBits));
    u->q = q;
    u->scale = VSet1(d);
    u->offset = m;
  }
};

template <>
struct Units<DType::kQ4_0> : SmallBlockUnits<false, false> {};
template <>
struct Units<DType::kQ4_1> : SmallBlockUnits<true, false> {};
template <>
struct Units<DType::kQ5_0> : SmallBlockUnits<false, true> {};
template <>
struct Units<DType::kQ5_1> : SmallBlockUnits<true, true> {};

// --- K-quants: 8 units per 256-element super-block; unit j is the codec's
// sub-block j (weight_codec.h has the layouts and the scale decoders).

// Lanes 0..3 get lo, lanes 4..7 get hi (a unit's two 16-element halves).
inline Vec TwoScales(float lo, float hi) {
#if SPECLINE_KERNELS_AVX2
  return _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo));
#else
  Vec v;
  for (int i = 0; i < kLanes; ++i) v.v[i] = i < 4 ? lo : hi;
  return v;
#endif
}

// The 32 bytes at p, each shifted right by `shift` and masked with `mask`
// (the mask drops what the 16-bit shift brings over from the next byte).
inline Bytes32 Fields(const uint8_t* p, int shift, uint8_t mask) {
#if SPECLINE_KERNELS_AVX2
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
#else
  Bytes32 v;
  for (int k = 0; k < 32; ++k) v.b[k] = static_cast<int8_t>((p[k] >> shift) & mask);
  return v;
#endif
}

// Each byte shifted left; the values are small enough not to carry over.
inline Bytes32 ShiftLeftBytes(Bytes32 a, int shift) {
#if SPECLINE_KERNELS_AVX2
  return _mm256_sll_epi16(a, _mm_cvtsi32_si128(shift));
#else
  for (int k = 0; k < 32; ++k) a.b[k] = static_cast<int8_t>(a.b[k] << shift);
  return a;
#endif
}

// Q4_K/Q5_K header: the 8 sub-blocks' d * sc and -(dmin * m), from the
// 12 packed 6-bit scale/min bytes at p + 4 (ggml's get_scale_min_k4 for all
// eight at once), the products in one vector multiply each.
struct ScaleMinHeader {
  float scale[8];
  float offset[8];
};

inline void LoadScaleMinHeader(const uint8_t* p, ScaleMinHeader* h) {
  uint32_t a[3];
  std::memcpy(a, p + 4, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  // Sub-blocks 0..3 keep the low 6 bits of bytes 0..3 (scales) and 4..7
  // (mins); 4..7 take the nibbles of bytes 8..11 plus the top 2 bits of
  // bytes 0..3 (scales) and 4..7 (mins).
  const uint32_t sc[2] = {a[0] & kLow6, (a[2] & kLow4) | (((a[0] >> 6) & kLow2) << 4)};
  const uint32_t mn[2] = {a[1] & kLow6, ((a[2] >> 4) & kLow4) | (((a[1] >> 6) & kLow2) << 4)};
  float d, dmin;
  HalfPair(p, &d, &dmin);
#if SPECLINE_KERNELS_AVX2
  // The same products as the loop below, eight at a time: this header is
  // decoded once per super-block per row, and done in scalar code it cost
  // as much as the eight units' dot products.
  const auto widen = [](const uint32_t* w) {
    uint64_t bytes;
    std::memcpy(&bytes, w, 8);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes))));
  };
  _mm256_storeu_ps(h->scale, _mm256_mul_ps(_mm256_set1_ps(d), widen(sc)));
  const __m256 mins = _mm256_mul_ps(_mm256_set1_ps(dmin), widen(mn));
  _mm256_storeu_ps(h->offset, _mm256_xor_ps(mins, _mm256_set1_ps(-0.0f)));
#else
  for (int j = 0; j < 8; ++j) {
    const int s = static_cast<int>((sc[j >> 2] >> (8 * (j & 3))) & 0xff);
    const int m = static_cast<int>((mn[j >> 2] >> (8 * (j & 3))) & 0xff);
    h->scale[j] = d * static_cast<float>(s);
    h->offset[j] = -(dmin * static_cast<float>(m));
  }
#endif
}

// Q4_K and Q5_K: (d * sc) * q - dmin * m over 8 sub-blocks of 32, q the low
// (j even) or high nibble of qs[32 * (j / 2) ..]; Q5_K adds a fifth bit, bit
// j of qh[l], and its nibbles follow the 32 qh bytes.
template <bool kFifthBit>
struct ScaleMinUnits : UnitsBase {
  static constexpr Offsets kOffsets = Offsets::kOne;
  static constexpr bool kSigned = false;
  static constexpr int kUnitsPerBlock = 8;
  static constexpr int kBlockBytes = kFifthBit ? 176 : 144;
  using Header = ScaleMinHeader;
  static void LoadHeader(const uint8_t* p, Header* h) { LoadScaleMinHeader(p, h); }
  static void Load(const uint8_t* p, int j, const Header& h, WeightUnit* u) {
    Bytes32 q = Fields(p + (kFifthBit ? 48 : 16) + 32 * (j >> 1), 4 * (j & 1), 0x0f);
    if constexpr (kFifthBit) q = AddBytes(q, ShiftLeftBytes(Fields(p + 16, j, 1), 4));
    u->q = q;
    u->scale = VSet1(h.scale[j]);
    u->offset = h.offset[j];
  }
};

template <>
struct Units<DType::kQ4_K> : ScaleMinUnits<false> {};
template <>
struct Units<DType::kQ5_K> : ScaleMinUnits<true> {};

// Q6_K: unit j = 4 * half + k takes the low (k < 2) or high nibbles of
// ql[64 * half + 32 * (k & 1) ..] and 2 high bits (shift 2k) of
// qh[32 * half ..]; level q - 32 with scales[8 * half + 2k] (+1 for its
// second 16 elements): d * s * (q - 32) = (d * s) * q + (-32 * d * s).
template <>
struct Units<DType::kQ6_K> : UnitsBase {
  static constexpr Offsets kOffsets = Offsets::kHalves;
  static constexpr bool kSigned = false;
  static constexpr int kUnitsPerBlock = 8;
  static constexpr int kBlockBytes = 210;
  struct Header {
    Vec scale[8];     // unit j: d * scales[2j] in lanes 0..3, d * scales[2j + 1] in 4..7
    float offset[16]; // -32 * d * scales[i]
  };
  static void LoadHeader(const uint8_t* p, Header* h) {
    const auto* scales = reinterpret_cast<const int8_t*>(p + 192);
    const float d = HalfToFloat(LoadU16(p + 208));
#if SPECLINE_KERNELS_AVX2
    // The loop below, vectorized (once per super-block per row; in scalar
    // code it cost more than the eight units' dot products).
    const __m256 vd = _mm256_set1_ps(d);
    __m256 s[2];
    for (int i = 0; i < 2; ++i) {
      int64_t bytes;
      std::memcpy(&bytes, scales + 8 * i, 8);
      s[i] = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes))));
      _mm256_storeu_ps(h->offset + 8 * i, _mm256_mul_ps(_mm256_set1_ps(-32.0f), s[i]));
    }
    for (int j = 0; j < 8; ++j) {
      const int a = 2 * (j & 3);
      h->scale[j] = _mm256_permutevar8x32_ps(s[j >> 2], _mm256_setr_epi32(a, a, a, a, a + 1, a + 1, a + 1, a + 1));
    }
#else
    float s[16];
    for (int i = 0; i < 16; ++i) {
      s[i] = d * static_cast<float>(scales[i]);
      h->offset[i] = -32.0f * s[i];
    }
    // Unit j = 4 * half + k uses scales 8 * half + 2k and 8 * half + 2k + 1.
    for (int j = 0; j < 8; ++j) h->scale[j] = TwoScales(s[2 * j], s[2 * j + 1]);
#endif
  }
  static void Load(const uint8_t* p, int j, const Header& h, WeightUnit* u) {
    const int half = j >> 2, k = j & 3;
    const uint8_t* ql = p + 64 * half + 32 * (k & 1);
    const uint8_t* qh = p + 128 + 32 * half;
    u->q = AddBytes(Fields(ql, 4 * (k >> 1), 0x0f), ShiftLeftBytes(Fields(qh, 2 * k, 3), 4));
    u->scale = h.scale[j];
    u->offset = h.offset[2 * j];
    u->offset_hi = h.offset[2 * j + 1];
  }
};

// Q3_K: unit j's levels are 2-bit fields (shift 2 * (j & 3)) of
// qs[32 * (j >> 2) ..] plus 4 where bit j of hmask[l] is set, minus 4:
// (d * s) * q + (-4 * d * s) with s the 6-bit scale of each half.
template <>
struct Units<DType::kQ3_K> : UnitsBase {
  static constexpr Offsets kOffsets = Offsets::kHalves;
  static constexpr bool kSigned = false;
  static constexpr int kUnitsPerBlock = 8;
  static constexpr int kBlockBytes = 110;
  struct Header {
    float s[16];  // d * the 16 unpacked 6-bit scales
  };
  static void LoadHeader(const uint8_t* p, Header* h) {
    const float d = HalfToFloat(LoadU16(p + 108));
    for (int i = 0; i < 16; ++i) h->s[i] = d * static_cast<float>(ScaleQ3K(i, p + 96));
  }
  static void Load(const uint8_t* p, int j, const Header& h, WeightUnit* u) {
    u->q = AddBytes(Fields(p + 32 + 32 * (j >> 2), 2 * (j & 3), 3),
                    ShiftLeftBytes(Fields(p, j, 1), 2));
    const float lo = h.s[2 * j];
    const float hi = h.s[2 * j + 1];
    u->scale = TwoScales(lo, hi);
    u->offset = -4.0f * lo;
    u->offset_hi = -4.0f * hi;
  }
};

// Q2_K: unit j's levels are 2-bit fields (shift 2 * (j & 3)) of
// qs[32 * (j >> 2) ..]; each half has its own 4-bit scale and min
// (scales[2j], scales[2j + 1]: min << 4 | scale).
template <>
struct Units<DType::kQ2_K> : UnitsBase {
  static constexpr Offsets kOffsets = Offsets::kHalves;
  static constexpr bool kSigned = false;
  static constexpr int kUnitsPerBlock = 8;
  static constexpr int kBlockBytes = 84;
  struct Header {
    float d, dmin;
  };
  static void LoadHeader(const uint8_t* p, Header* h) { HalfPair(p + 80, &h->d, &h->dmin); }
  static void Load(const uint8_t* p, int j, const Header& h, WeightUnit* u) {
    const uint8_t lo = p[2 * j], hi = p[2 * j + 1];
    u->q = Fields(p + 16 + 32 * (j >> 2), 2 * (j & 3), 3);
    u->scale = TwoScales(h.d * static_cast<float>(lo & 0x0f), h.d * static_cast<float>(hi & 0x0f));
    u->offset = -(h.dmin * static_cast<float>(lo >> 4));
    u->offset_hi = -(h.dmin * static_cast<float>(hi >> 4));
  }
};

// Every quantized type has the integer path.
constexpr bool HasIntegerPath(DType t) { return BlockElems(t) > 1; }

}  // namespace specline::kernels::detail
