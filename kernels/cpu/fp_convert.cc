// Scalar fp16/bf16 conversions. fp16 uses the F16C instructions where the
// build targets them (identical results to the portable code, which the tests
// check exhaustively); bf16 is a bit shift one way and round-to-nearest-even
// the other.
#include "kernels/cpu/fp16_portable.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specline::kernels {

float F16ToF32(uint16_t h) {
#if SPECLINE_KERNELS_AVX2
  return _cvtsh_ss(h);
#else
  return detail::F16ToF32Portable(h);
#endif
}

uint16_t F32ToF16(float f) {
#if SPECLINE_KERNELS_AVX2
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  return detail::F32ToF16Portable(f);
#endif
}

float BF16ToF32(uint16_t h) {
  return detail::BitsToF32(static_cast<uint32_t>(h) << 16);
}

uint16_t F32ToBF16(float f) {
  const uint32_t u = detail::F32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every payload bit left and yield inf.
    return static_cast<uint16_t>((u >> 16) | 0x0040);
  }
  // Round to nearest, ties to even; overflow carries into inf as it should.
  const uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace specline::kernels
