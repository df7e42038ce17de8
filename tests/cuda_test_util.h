// Shared by the cuda_*_test binaries: skipping without a device, and
// moving test data to and from the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/dtype.h"

namespace specline::testing {

// True when no CUDA device is usable (says why once, on stderr). Tests start
// with SPECLINE_SKIP_WITHOUT_GPU(), which marks them skipped.
bool NoGpu();
#define SPECLINE_SKIP_WITHOUT_GPU()                                             \
  do {                                                                          \
    if (::specline::testing::NoGpu()) GTEST_SKIP() << "no CUDA device: skipped"; \
  } while (0)

// Host <-> device copies of whole vectors (synchronous).
template <typename T>
cuda::DeviceBuffer Upload(const std::vector<T>& host) {
  cuda::DeviceBuffer d(std::max<size_t>(host.size() * sizeof(T), 1));
  if (!host.empty()) {
    SPECLINE_CUDA_CHECK(
        cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  return d;
}
template <typename T>
std::vector<T> Download(const cuda::DeviceBuffer& d, size_t count) {
  std::vector<T> host(count);
  SPECLINE_CUDA_CHECK(cudaDeviceSynchronize());
  if (count) {
    SPECLINE_CUDA_CHECK(cudaMemcpy(host.data(), d.get(), count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  return host;
}

// fp32 values rounded to `t` (bf16 or fp16), as raw 16-bit words, and back:
// the CPU reference computes on exactly the values the GPU sees.
std::vector<uint16_t> ToHalfBits(DType t, const std::vector<float>& values);
std::vector<float> FromHalfBits(DType t, const std::vector<uint16_t>& bits);

// ||a - b|| / ||b|| (0 when both are empty); NaN anywhere gives +inf.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace specline::testing
