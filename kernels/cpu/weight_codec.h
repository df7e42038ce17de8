// Decoders from each weight dtype's in-memory layout to fp32 vectors, shared
// by DequantizeRow, GEMV and the GEMM panel packer so that all three produce
// exactly the same floats. A row is decoded in "steps": 8 elements for the
// float types, one 32-element block (4 vectors) for the GGML quant types.
//
// Dequantized values (one rounding each, identical on both code paths):
//   Q8_0: d * q            Q4_0: d * (q - 8)            Q4_1: fma(q, d, m)
// GGML nibble order: byte j of a Q4 block holds element j in its low nibble
// and element j + 16 in its high nibble.
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

// True for the types whose rows may end in a partial step (any cols).
template <DType T>
constexpr bool kHasPartialSteps = Codec<T>::kStepElems == 8;

// Decodes the first n elements of a row into dst (n a multiple of the block
// size for quant types).
template <DType T>
void DecodeRow(const uint8_t* src, int64_t n, float* dst) {
  using C = Codec<T>;
  constexpr int kVecs = C::kStepElems / kLanes;
  const int64_t steps = n / C::kStepElems;
  Vec v[kVecs];
  for (int64_t s = 0; s < steps; ++s) {
    C::Decode(src + s * C::kStepBytes, v);
    for (int i = 0; i < kVecs; ++i) VStore(dst + s * C::kStepElems + i * kLanes, v[i]);
  }
  if constexpr (kHasPartialSteps<T>) {
    const int rest = static_cast<int>(n - steps * C::kStepElems);
    if (rest > 0) {
      VStorePartial(dst + steps * C::kStepElems,
                    C::DecodePartial(src + steps * C::kStepBytes, rest), rest);
    }
  }
}

}  // namespace specline::kernels::detail
