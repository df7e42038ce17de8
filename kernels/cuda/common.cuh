// Small device helpers shared by the CUDA kernels (header-only, generic):
// element type <-> fp32 conversion, 16-byte vector loads/stores of 8
// elements, warp and block reductions, and the host-side dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"

namespace specline::cuda {

// ------------------------------------------------------------ conversions

template <typename T>
__device__ __forceinline__ float ToF32(T v);
template <>
__device__ __forceinline__ float ToF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToF32<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float ToF32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round to nearest even (both intrinsics), NaN stays NaN.
template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ------------------------------------------------------- 16-byte vectors

// 8 elements of a 2-byte type in one 16-byte access. The pointer must be
// 16-byte aligned.
inline constexpr int kVec = 8;

template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&v)[kVec]) {
  static_assert(sizeof(T) == 2, "Load8 is for 2-byte element types");
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = ToF32(e[i]);
}

template <typename T>
__device__ __forceinline__ void Store8(T* p, const float (&v)[kVec]) {
  static_assert(sizeof(T) == 2, "Store8 is for 2-byte element types");
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec; ++i) e[i] = FromF32<T>(v[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// 8 floats as two float4 (32 bytes, 16-byte aligned).
__device__ __forceinline__ void Load8(const float* p, float (&v)[kVec]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

__device__ __forceinline__ void Store8(float* p, const float (&v)[kVec]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__host__ __device__ __forceinline__ bool IsAligned(const void* p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes)) == 0;
}

// ------------------------------------------------------------- reductions

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide reductions: every thread of the block must call them (the
// block size a multiple of 32, at most 1024); every thread gets the result.
// They synchronize twice, so they can be called back to back.
template <typename V, typename Op>
__device__ __forceinline__ V BlockReduce(V v, Op op, V identity) {
  __shared__ V partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < n_warps ? partial[lane] : identity;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct SumOp {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a > b ? a : b;
  }
};
struct MinOp {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a < b ? a : b;
  }
};

__device__ __forceinline__ float BlockSum(float v) { return BlockReduce(v, SumOp{}, 0.0f); }
__device__ __forceinline__ double BlockSumD(double v) { return BlockReduce(v, SumOp{}, 0.0); }
__device__ __forceinline__ float BlockMax(float v) {
  return BlockReduce(v, MaxOp{}, -INFINITY);
}

// Block-wide exclusive prefix sum (V = int, float, double, unsigned long
// long): every thread must call it; returns the sum of the values of the
// threads before it, and the block's total in *total. Synchronizes at the
// end, so it can be called back to back.
template <typename V>
__device__ __forceinline__ V BlockExclusiveSum(V v, V* total) {
  __shared__ V warp_sums[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  V incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    V s = lane < n_warps ? warp_sums[lane] : V(0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const V up = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += up;
    }
    __syncwarp();
    if (lane < n_warps) warp_sums[lane] = s;  // inclusive over warps
  }
  __syncthreads();
  const V before = warp > 0 ? warp_sums[warp - 1] : V(0);
  *total = warp_sums[n_warps - 1];
  V excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = V(0);
  __syncthreads();
  return before + excl;
}

// --------------------------------------------------------------- dispatch

// Calls f(T{}) with T = __nv_bfloat16 or __half for t; throws otherwise.
template <typename F>
inline void DispatchHalfType(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::kBF16: f(__nv_bfloat16{}); return;
    case DType::kF16: f(__half{}); return;
    default:
      throw std::invalid_argument(std::string(what) + ": unsupported element type " +
                                  std::string(DTypeName(t)));
  }
}

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace specline::cuda
