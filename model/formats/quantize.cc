#include "model/formats/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"

namespace specline {

namespace {

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Q8_0: d = max|x| / 127, q = round(x / d).
void EncodeQ8_0(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  for (int i = 0; i < 32; ++i) {
    out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[i] * id)));
  }
}

// Q4_0: d = m / -8 where m is the value of largest magnitude (sign kept), so
// m itself maps to q = 0; q = x / d + 8 clamped to [0, 15]. Byte j holds
// element j (low nibble) and element j + 16 (high nibble).
void EncodeQ4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  const float d = m / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  for (int j = 0; j < 16; ++j) {
    int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q4_1: d = (max - min) / 15, m = min, q = (x - min) / d rounded.
void EncodeQ4_1(const float* x, uint8_t* out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float d = (hi - lo) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  PutU16(out, kernels::F32ToF16(d));
  PutU16(out + 2, kernels::F32ToF16(lo));
  for (int j = 0; j < 16; ++j) {
    int q0 = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
    int q1 = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
    out[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

std::vector<uint8_t> EncodeValues(DType dtype, const float* src, int64_t n) {
  auto bytes = RowBytes(dtype, n);
  if (!bytes) {
    throw std::invalid_argument(std::to_string(n) + " values are not a whole number of " +
                                std::string(DTypeName(dtype)) + " blocks");
  }
  std::vector<uint8_t> out(*bytes);
  uint8_t* o = out.data();
  switch (dtype) {
    case DType::kF32:
      std::memcpy(o, src, n * 4);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) PutU16(o + 2 * i, kernels::F32ToF16(src[i]));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) PutU16(o + 2 * i, kernels::F32ToBF16(src[i]));
      break;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ8_0(src + 32 * b, o + 34 * b);
      break;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ4_0(src + 32 * b, o + 18 * b);
      break;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b) EncodeQ4_1(src + 32 * b, o + 20 * b);
      break;
  }
  return out;
}

}  // namespace specline
