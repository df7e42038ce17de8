// Bit-exact software fp16 <-> fp32 conversions. They are the implementation
// on targets without F16C and the reference the tests hold the hardware path
// to, so both builds round identically (IEEE round-to-nearest-even).
#pragma once

#include <cstdint>
#include <cstring>

namespace specline::kernels::detail {

inline float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float F16ToF32Portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) {  // inf / nan: keep the payload and quiet it, as F16C does
    const uint32_t quiet = mant != 0 ? 0x00400000u : 0;
    return BitsToF32(sign | 0x7f800000u | quiet | (mant << 13));
  }
  if (exp != 0) {
    return BitsToF32(sign | ((exp + 112) << 23) | (mant << 13));
  }
  if (mant == 0) return BitsToF32(sign);
  // Subnormal: shift the leading one up into the implicit position.
  int e = 113;  // exponent of 2^-14 in fp32 bias, minus one per shift below
  while ((mant & 0x400) == 0) {
    mant <<= 1;
    --e;
  }
  mant &= 0x3ff;
  return BitsToF32(sign | (static_cast<uint32_t>(e) << 23) | (mant << 13));
}

inline uint16_t F32ToF16Portable(float f) {
  const uint32_t u = F32ToBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // nan: keep it quiet and keep the top payload bits
    return sign | 0x7e00 | static_cast<uint16_t>((abs >> 13) & 0x3ff);
  }
  if (abs >= 0x47800000u) return sign | 0x7c00;  // >= 65536: inf
  const int exp = static_cast<int>(abs >> 23);   // biased fp32 exponent
  if (exp >= 113) {
    // Normal fp16 range (>= 2^-14). Rebias, then round the 13 dropped bits
    // to nearest even; a carry out of the mantissa correctly bumps the
    // exponent, up to inf for values in [65520, 65536).
    const uint32_t rebased = abs - (112u << 23);
    const uint32_t round = 0xfff + ((rebased >> 13) & 1);
    return sign | static_cast<uint16_t>((rebased + round) >> 13);
  }
  if (exp < 102) return sign;  // below half the smallest subnormal: zero
  // Subnormal fp16: value = mant24 * 2^(exp-150); unit is 2^-24.
  const uint32_t mant24 = (abs & 0x7fffff) | 0x800000;
  const int shift = 126 - exp;  // 14..24
  uint32_t q = mant24 >> shift;
  const uint32_t rem = mant24 & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  return sign | static_cast<uint16_t>(q);
}

}  // namespace specline::kernels::detail
