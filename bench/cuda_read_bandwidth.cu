#include "bench/cuda_read_bandwidth.h"

#include <cstdint>

namespace specline::cuda_bench {
namespace {

__device__ __forceinline__ unsigned Fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Grid-stride over n 16-byte words, four loads in flight per thread.
__global__ void ReadAll(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= Fold(a) ^ Fold(b) ^ Fold(c) ^ Fold(d);
  }
  for (; i < n; i += stride) acc ^= Fold(p[i]);
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

void EnqueueReadPass(const void* src, size_t bytes, unsigned* sink, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  // 4 blocks of 512 threads per SM: every SM full (2048 threads).
  ReadAll<<<sms * 4, 512, 0, stream>>>(static_cast<const uint4*>(src), bytes / 16, sink);
}

}  // namespace specline::cuda_bench
