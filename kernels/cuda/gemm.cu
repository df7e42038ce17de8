#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/cuda_check.h"

namespace specline::cuda {
namespace {

#define SPECLINE_CUBLAS_CHECK(call)                                                        \
  do {                                                                                     \
    const cublasStatus_t specline_st_ = (call);                                            \
    if (specline_st_ != CUBLAS_STATUS_SUCCESS) {                                           \
      ThrowCudaError(#call, Cublas().status_string(specline_st_), __FILE__, __LINE__);     \
    }                                                                                      \
  } while (0)

// cuBLAS wants a workspace it owns for graph capture (it must not allocate
// while a stream is being captured); 32 MiB covers its Hopper kernels.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

constexpr int kGemvWarps = 8;     // warps per block, one output row each
constexpr int kGemvUnroll = 4;    // 16-byte weight loads in flight per lane

// Dot of 8 packed elements of w and x (one 16-byte chunk each).
template <typename T>
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x) {
  const T* wv = reinterpret_cast<const T*>(&w);
  const T* xv = reinterpret_cast<const T*>(&x);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += ToF32(wv[i]) * ToF32(xv[i]);
  return s;
}

// One warp per output row r: acc[j] = sum_c W[r, c] * x[j, c] for the M
// input rows. Vec: rows are whole 16-byte chunks (cols % 8 == 0 and the
// pointers aligned), so each lane streams 16 bytes per load; the weight
// loads of kGemvUnroll chunks are issued before any is used.
template <typename T, typename OutT, int M, bool Vec>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvKernel(const T* __restrict__ w, const T* __restrict__ x, OutT* __restrict__ y,
               int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t{blockIdx.x} * kGemvWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  float acc[M];
#pragma unroll
  for (int j = 0; j < M; ++j) acc[j] = 0.0f;
  const T* wr = w + r * cols;
  if constexpr (Vec) {
    const int64_t chunks = cols / 8;
    const uint4* w4 = reinterpret_cast<const uint4*>(wr);
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    int64_t c = lane;
    for (; c + 32 * (kGemvUnroll - 1) < chunks; c += 32 * kGemvUnroll) {
      uint4 wv[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) wv[u] = __ldg(w4 + c + 32 * u);
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < M; ++j) acc[j] += Dot8<T>(wv[u], __ldg(x4 + j * chunks + c + 32 * u));
      }
    }
    for (; c < chunks; c += 32) {
      const uint4 wv = __ldg(w4 + c);
#pragma unroll
      for (int j = 0; j < M; ++j) acc[j] += Dot8<T>(wv, __ldg(x4 + j * chunks + c));
    }
  } else {
    for (int64_t c = lane; c < cols; c += 32) {
      const float wv = ToF32(wr[c]);
#pragma unroll
      for (int j = 0; j < M; ++j) acc[j] += wv * ToF32(x[j * cols + c]);
    }
  }
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const float s = WarpSum(acc[j]);
    if (lane == 0) y[int64_t{j} * rows + r] = FromF32<OutT>(s);
  }
}

template <typename T, typename OutT, int M>
void LaunchGemv(const DeviceMatrix& w, const void* x, void* y, cudaStream_t stream) {
  const bool vec = w.cols % 8 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const dim3 grid(static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps));
  const dim3 block(kGemvWarps * 32);
  auto* wp = static_cast<const T*>(w.data);
  auto* xp = static_cast<const T*>(x);
  auto* yp = static_cast<OutT*>(y);
  if (vec) {
    GemvKernel<T, OutT, M, true><<<grid, block, 0, stream>>>(wp, xp, yp, w.rows, w.cols);
  } else {
    GemvKernel<T, OutT, M, false><<<grid, block, 0, stream>>>(wp, xp, yp, w.rows, w.cols);
  }
  SPECLINE_CUDA_CHECK_LAUNCH();
}

template <typename T, typename OutT>
void GemvRows(const DeviceMatrix& w, const void* x, int m, void* y, cudaStream_t stream) {
  switch (m) {
    case 1: return LaunchGemv<T, OutT, 1>(w, x, y, stream);
    case 2: return LaunchGemv<T, OutT, 2>(w, x, y, stream);
    case 3: return LaunchGemv<T, OutT, 3>(w, x, y, stream);
    case 4: return LaunchGemv<T, OutT, 4>(w, x, y, stream);
    case 5: return LaunchGemv<T, OutT, 5>(w, x, y, stream);
    case 6: return LaunchGemv<T, OutT, 6>(w, x, y, stream);
    case 7: return LaunchGemv<T, OutT, 7>(w, x, y, stream);
    case 8: return LaunchGemv<T, OutT, 8>(w, x, y, stream);
  }
  throw std::invalid_argument("Gemv: m must be in [1, " + std::to_string(kGemvMaxRows) + "]");
}

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: break;
  }
  throw std::invalid_argument("GPU matrices are bf16 or fp16, not " +
                              std::string(DTypeName(t)));
}

}  // namespace

void Gemv(const DeviceMatrix& w, const void* x, int m, void* y, bool y_f32, cudaStream_t stream) {
  if (m == 0 || w.rows == 0) return;
  if (w.t == DType::kBF16) {
    if (y_f32) return GemvRows<__nv_bfloat16, float>(w, x, m, y, stream);
    return GemvRows<__nv_bfloat16, __nv_bfloat16>(w, x, m, y, stream);
  }
  if (w.t == DType::kF16) {
    if (y_f32) return GemvRows<__half, float>(w, x, m, y, stream);
    return GemvRows<__half, __half>(w, x, m, y, stream);
  }
  CudaType(w.t);  // throws
}

Gemm::Gemm(cudaStream_t stream) : stream_(stream), workspace_(kCublasWorkspaceBytes) {
  const CublasApi& api = Cublas();
  SPECLINE_CUBLAS_CHECK(api.create(&handle_));
  SPECLINE_CUBLAS_CHECK(api.set_stream(handle_, stream_));
  SPECLINE_CUBLAS_CHECK(api.set_workspace(handle_, workspace_.get(), workspace_.bytes()));
  // Tensor-core math with fp32 accumulation; no reduced-precision reductions.
  SPECLINE_CUBLAS_CHECK(api.set_math_mode(handle_, CUBLAS_DEFAULT_MATH));
}

Gemm::~Gemm() {
  if (handle_) Cublas().destroy(handle_);
}

void Gemm::Run(const DeviceMatrix& w, const void* x, int64_t m, void* y, bool y_f32) {
  if (m <= 0 || w.rows == 0) return;
  if (m <= kGemvMaxRows && small_m_ == SmallMPath::kGemv) {
    Gemv(w, x, static_cast<int>(m), y, y_f32, stream_);
    return;
  }
  RunCublas(w, x, m, y, y_f32);
}

void Gemm::RunCublas(const DeviceMatrix& w, const void* x, int64_t m, void* y, bool y_f32) {
  // Column-major view: W (row-major [rows, cols]) is W^T column-major with
  // leading dimension cols, x likewise, so Y^T[rows, m] = op(W^T)^T ... i.e.
  // C = A^T B with A = W^T (cols x rows, ld cols), B = x^T (cols x m, ld
  // cols), C = y^T (rows x m, ld rows).
  const cudaDataType_t ab = CudaType(w.t);
  const cudaDataType_t c = y_f32 ? CUDA_R_32F : ab;
  const float alpha = 1.0f, beta = 0.0f;
  SPECLINE_CUBLAS_CHECK(Cublas().gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                                     static_cast<int>(m), static_cast<int>(w.cols), &alpha,
                                     w.data, ab, static_cast<int>(w.cols), x, ab,
                                     static_cast<int>(w.cols), &beta, y, c,
                                     static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
}

}  // namespace specline::cuda
