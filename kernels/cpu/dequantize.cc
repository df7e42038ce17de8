// DequantizeRow: the public face of the weight codecs (weight_codec.h), used
// by loaders and the embedding lookup; same floats as MatMul sees.
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/weight_codec.h"

namespace specline::kernels {

void DequantizeRow(DType t, const void* src, int64_t n, float* dst) {
  if (n < 0 || n % BlockElems(t) != 0) {
    throw std::invalid_argument("DequantizeRow: " + std::to_string(n) +
                                " is not a whole number of " +
                                std::string(DTypeName(t)) + " blocks");
  }
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::kF32: return detail::DecodeRow<DType::kF32>(p, n, dst);
    case DType::kF16: return detail::DecodeRow<DType::kF16>(p, n, dst);
    case DType::kBF16: return detail::DecodeRow<DType::kBF16>(p, n, dst);
    case DType::kQ8_0: return detail::DecodeRow<DType::kQ8_0>(p, n, dst);
    case DType::kQ4_0: return detail::DecodeRow<DType::kQ4_0>(p, n, dst);
    case DType::kQ4_1: return detail::DecodeRow<DType::kQ4_1>(p, n, dst);
    case DType::kQ5_0: return detail::DecodeRow<DType::kQ5_0>(p, n, dst);
    case DType::kQ5_1: return detail::DecodeRow<DType::kQ5_1>(p, n, dst);
    case DType::kQ2_K: return detail::DecodeRow<DType::kQ2_K>(p, n, dst);
    case DType::kQ3_K: return detail::DecodeRow<DType::kQ3_K>(p, n, dst);
    case DType::kQ4_K: return detail::DecodeRow<DType::kQ4_K>(p, n, dst);
    case DType::kQ5_K: return detail::DecodeRow<DType::kQ5_K>(p, n, dst);
    case DType::kQ6_K: return detail::DecodeRow<DType::kQ6_K>(p, n, dst);
  }
}

}  // namespace specline::kernels
