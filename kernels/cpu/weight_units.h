// The weight side of the integer matmul path for the 32-element block types
// (Q8_0, Q4_0/Q4_1, Q5_0/Q5_1; the K-quants take kquant_units.h): a block is
// read as a "unit", a vector of 32 int8 levels with a per-lane float scale
// and a float offset:
//
//   w[k] = scale[k / 4] * q[k] + offset                   (k = 0..31)
//
// Every type but Q8_0 is read with unsigned levels (Q4_0's q - 8 becomes q
// with offset -8d), which
// AVX2's maddubs (unsigned x signed bytes) takes as they are; Q8_0's signed
// levels lend their sign to the activation first. A unit meets an
// activation block (q8_activation.h) in DotUnit:
//
//   lanes[j] = sum_{k=4j..4j+3} q[k] * xq[k]                   (exact, int32)
//   acc[j]   = fma(scale[j] * xd, lanes[j], acc[j])             (8 float lanes)
//   off      = fma(offset, xds, off)            (xds = xd * sum of xq)
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
  Bytes32 q;        // levels: 0..31 (unsigned types) or -128..127 (Q8_0)
  Vec scale;        // per 4-element lane
  float offset;     // added to every element (Offsets::kOne)
};

// How a type's units carry offsets.
enum class Offsets { kNone, kOne };

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
  }
}

// Unit loaders, one per GGML block layout (weight_codec.h describes the
// layouts). kUnitsPerBlock units share one block of kBlockBytes bytes; what
// they would share is decoded once per block into a Header by LoadHeader,
// then Load(block, j, header) gives unit j. (Every type here has one unit
// per block and an empty header.)
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

// The K-quants (256-element super-blocks) meet Q8_K activations instead:
// kquant_units.h.

// Every quantized type has the integer path.
constexpr bool HasIntegerPath(DType t) { return BlockElems(t) > 1; }

}  // namespace specline::kernels::detail
