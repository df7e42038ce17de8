#include "tests/cuda_test_util.h"

#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/ops.h"

namespace specline::testing {

bool NoGpu() {
  static const bool none = [] {
    std::string why;
    if (cuda::DeviceAvailable(&why)) return false;
    std::fprintf(stderr, "[ cuda ] no usable CUDA device (%s): GPU tests skip\n", why.c_str());
    return true;
  }();
  return none;
}

std::vector<uint16_t> ToHalfBits(DType t, const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = t == DType::kBF16 ? kernels::F32ToBF16(values[i]) : kernels::F32ToF16(values[i]);
  }
  return out;
}

std::vector<float> FromHalfBits(DType t, const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    out[i] = t == DType::kBF16 ? kernels::BF16ToF32(bits[i]) : kernels::F16ToF32(bits[i]);
  }
  return out;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    const double d = double{a[i]} - double{b[i]};
    num += d * d;
    den += double{b[i]} * double{b[i]};
  }
  if (den == 0) return num == 0 ? 0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

}  // namespace specline::testing
