#include "kernels/cuda/moe.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"

namespace specline::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t items) {
  return static_cast<int>(std::min<int64_t>(4096, (items + kThreads - 1) / kThreads));
}

template <typename T>
__global__ void GatherRowsKernel(const T* __restrict__ src, int src_stride,
                                 const int32_t* __restrict__ rows, int m, int cols,
                                 T* __restrict__ dst) {
  const int64_t total = static_cast<int64_t>(m) * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i / cols, c = i % cols;
    dst[i] = src[static_cast<int64_t>(rows[j]) * src_stride + c];
  }
}

template <typename T>
__global__ void ScatterAddScaledKernel(const T* __restrict__ src, int m, int cols,
                                       const int32_t* __restrict__ rows,
                                       const float* __restrict__ weights, float* __restrict__ acc) {
  const int64_t total = static_cast<int64_t>(m) * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i / cols, c = i % cols;
    float* out = acc + static_cast<int64_t>(rows[j]) * cols + c;
    // Explicit rounding (no FMA contraction), as the CPU's o += w * y.
    *out = __fadd_rn(*out, __fmul_rn(weights[j], ToF32(src[i])));
  }
}

}  // namespace

void GatherRows(DType t, const void* src, int src_stride, const int32_t* rows, int m, int cols,
                void* dst, cudaStream_t stream) {
  DispatchHalfType(t, "GatherRows", [&](auto tag) {
    using T = decltype(tag);
    if (m <= 0 || cols <= 0) return;
    GatherRowsKernel<T><<<Blocks(int64_t{m} * cols), kThreads, 0, stream>>>(
        static_cast<const T*>(src), src_stride, rows, m, cols, static_cast<T*>(dst));
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void ScatterAddScaled(DType t, const void* src, int m, int cols, const int32_t* rows,
                      const float* weights, float* acc, cudaStream_t stream) {
  DispatchHalfType(t, "ScatterAddScaled", [&](auto tag) {
    using T = decltype(tag);
    if (m <= 0 || cols <= 0) return;
    ScatterAddScaledKernel<T><<<Blocks(int64_t{m} * cols), kThreads, 0, stream>>>(
        static_cast<const T*>(src), m, cols, rows, weights, acc);
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace specline::cuda
