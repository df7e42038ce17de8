// Elementwise kernels of the GPU backend (kernels/cuda/ops.h, "elementwise"):
// embedding, norms, RoPE, SwiGLU, KV-cache writes, conversions, random fill.
//
// All are memory-bound. Each has a 16-byte vector path (8 elements of a
// 2-byte type per access) taken when the row length, strides and base
// pointers allow it, and a scalar path otherwise; arithmetic is fp32.
// Row kernels (the norms) use one block (or one warp per head) per row with
// an fp32 reduction; flat kernels use grid-stride loops.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace specline::cuda {
namespace {

constexpr int kFlatThreads = 256;
// Grid-stride kernels launch at most this many blocks (enough to fill an
// H100 several times over); larger sizes loop.
constexpr int64_t kMaxFlatBlocks = 4096;

int FlatBlocks(int64_t work_items) {
  return static_cast<int>(
      std::min<int64_t>(kMaxFlatBlocks, (work_items + kFlatThreads - 1) / kFlatThreads));
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ------------------------------------------------------------- EmbedTokens

template <typename T, bool kVector>
__global__ void EmbedTokensKernel(const T* __restrict__ table, const int32_t* __restrict__ tokens,
                                  int dim, float* __restrict__ x) {
  const int row = blockIdx.x;
  const T* src = table + static_cast<int64_t>(tokens[row]) * dim;
  float* dst = x + static_cast<int64_t>(row) * dim;
  if constexpr (kVector) {
    for (int c = threadIdx.x * kVec; c < dim; c += blockDim.x * kVec) {
      float v[kVec];
      Load8(src + c, v);
      Store8(dst + c, v);
    }
  } else {
    for (int c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = ToF32(src[c]);
  }
}

// ---------------------------------------------------------------- RmsNorm

// Threads for a one-block-per-row kernel over `dim` elements: about one
// 8-element vector per thread, a multiple of 32, within [64, 1024].
int RowThreads(int dim) {
  const int vecs = (dim + kVec - 1) / kVec;
  return std::clamp((vecs + 31) / 32 * 32, 64, 1024);
}

template <typename T, bool kVector>
__global__ void AddRmsNormKernel(float* __restrict__ x, const T* __restrict__ delta,
                                 const float* __restrict__ weight, float eps, int dim,
                                 T* __restrict__ out) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float* xr = x + base;
  float sum_sq = 0.0f;
  // Pass 1: residual add (written back) and sum of squares. Each thread
  // later re-reads only the elements it wrote itself.
  if constexpr (kVector) {
    for (int c = threadIdx.x * kVec; c < dim; c += blockDim.x * kVec) {
      float v[kVec];
      Load8(xr + c, v);
      if (delta != nullptr) {
        float d[kVec];
        Load8(delta + base + c, d);
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] += d[k];
        Store8(xr + c, v);
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum_sq = fmaf(v[k], v[k], sum_sq);
    }
  } else {
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
      float v = xr[c];
      if (delta != nullptr) {
        v += ToF32(delta[base + c]);
        xr[c] = v;
      }
      sum_sq = fmaf(v, v, sum_sq);
    }
  }
  sum_sq = BlockSum(sum_sq);
  // Same expression as kernels::RmsNorm: (x * scale) * weight.
  const float scale = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  T* orow = out + base;
  if constexpr (kVector) {
    for (int c = threadIdx.x * kVec; c < dim; c += blockDim.x * kVec) {
      float v[kVec], w[kVec];
      Load8(xr + c, v);
      Load8(weight + c, w);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = v[k] * scale * w[k];
      Store8(orow + c, v);
    }
  } else {
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
      orow[c] = FromF32<T>(xr[c] * scale * weight[c]);
    }
  }
}

// One warp per head: v = v / rms(v) * weight, in place.
constexpr int kHeadWarps = 4;  // heads per block

template <typename T, bool kVector>
__global__ void HeadRmsNormKernel(T* __restrict__ rows, const float* __restrict__ weight, float eps,
                                  int n_rows, int heads, int head_dim, int stride) {
  const int lane = threadIdx.x & 31;
  const int64_t head = static_cast<int64_t>(blockIdx.x) * kHeadWarps + (threadIdx.x >> 5);
  if (head >= static_cast<int64_t>(n_rows) * heads) return;  // whole warp leaves together
  const int64_t r = head / heads;
  const int h = static_cast<int>(head % heads);
  T* v = rows + r * stride + static_cast<int64_t>(h) * head_dim;
  float sum_sq = 0.0f;
  if constexpr (kVector) {
    for (int c = lane * kVec; c < head_dim; c += 32 * kVec) {
      float a[kVec];
      Load8(v + c, a);
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum_sq = fmaf(a[k], a[k], sum_sq);
    }
  } else {
    for (int c = lane; c < head_dim; c += 32) {
      const float a = ToF32(v[c]);
      sum_sq = fmaf(a, a, sum_sq);
    }
  }
  sum_sq = WarpSum(sum_sq);
  const float scale = 1.0f / sqrtf(sum_sq / static_cast<float>(head_dim) + eps);
  if constexpr (kVector) {
    for (int c = lane * kVec; c < head_dim; c += 32 * kVec) {
      float a[kVec], w[kVec];
      Load8(v + c, a);
      Load8(weight + c, w);
#pragma unroll
      for (int k = 0; k < kVec; ++k) a[k] = a[k] * scale * w[k];
      Store8(v + c, a);
    }
  } else {
    for (int c = lane; c < head_dim; c += 32) v[c] = FromF32<T>(ToF32(v[c]) * scale * weight[c]);
  }
}

// ------------------------------------------------------- residual and bias

template <typename T>
__global__ void AddResidualKernel(float* __restrict__ x, const T* __restrict__ delta,
                                  int64_t count, bool vector) {
  const int64_t tid = GlobalThread(), threads = GridThreads();
  int64_t done = 0;
  if (vector) {
    const int64_t vecs = count / kVec;
    for (int64_t i = tid; i < vecs; i += threads) {
      float a[kVec], d[kVec];
      Load8(x + i * kVec, a);
      Load8(delta + i * kVec, d);
#pragma unroll
      for (int k = 0; k < kVec; ++k) a[k] += d[k];
      Store8(x + i * kVec, a);
    }
    done = vecs * kVec;
  }
  for (int64_t i = done + tid; i < count; i += threads) x[i] += ToF32(delta[i]);
}

template <typename T, bool kVector>
__global__ void AddBiasKernel(T* __restrict__ rows, const float* __restrict__ bias, int n_rows,
                              int width, int stride) {
  constexpr int kStep = kVector ? kVec : 1;
  const int per_row = width / kStep;
  const int64_t total = static_cast<int64_t>(n_rows) * per_row;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const int64_t r = i / per_row;
    const int c = static_cast<int>(i % per_row) * kStep;
    T* p = rows + r * stride + c;
    if constexpr (kVector) {
      float a[kVec], b[kVec];
      Load8(p, a);
      Load8(bias + c, b);
#pragma unroll
      for (int k = 0; k < kVec; ++k) a[k] += b[k];
      Store8(p, a);
    } else {
      *p = FromF32<T>(ToF32(*p) + bias[c]);
    }
  }
}

// -------------------------------------------------------------------- RoPE

// One thread per rotated pair.
// Partial rotary (Phi-4-mini): only the first rot_dim dims of each head
// rotate; cos/sin rows stay head_dim/2 wide.
template <typename T>
__global__ void RopeKernel(T* __restrict__ rows, int n_rows, int heads, int head_dim, int stride,
                           const float* __restrict__ cos, const float* __restrict__ sin,
                           bool interleaved, int rot_dim) {
  const int half = rot_dim / 2;
  const int cos_stride = head_dim / 2;
  const int64_t per_row = static_cast<int64_t>(heads) * half;
  const int64_t total = per_row * n_rows;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const int64_t r = i / per_row;
    const int in_row = static_cast<int>(i % per_row);
    const int h = in_row / half;
    const int j = in_row % half;
    T* head = rows + r * stride + static_cast<int64_t>(h) * head_dim;
    const int ia = interleaved ? 2 * j : j;
    const int ib = interleaved ? 2 * j + 1 : j + half;
    const float a = ToF32(head[ia]);
    const float b = ToF32(head[ib]);
    const float c = cos[r * cos_stride + j];
    const float s = sin[r * cos_stride + j];
    // Rope::Apply's expressions, with explicit roundings (no FMA
    // contraction) so the fp32 result is the CPU's before the cast.
    head[ia] = FromF32<T>(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    head[ib] = FromF32<T>(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
  }
}

// ------------------------------------------------------- SwiGLU and GeGLU

// The gate's activations: SiLU (Llama's SwiGLU) and gelu with the tanh
// approximation (Gemma's gelu_pytorch_tanh, GeGLU).
struct SiluAct {
  __device__ __forceinline__ float operator()(float g) const { return g / (1.0f + expf(-g)); }
};
struct GeluTanhAct {
  __device__ __forceinline__ float operator()(float g) const {
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + tanhf(inner));
  }
};

// out[r] = act(gate[r]) * up[r] over rows [gate | up] of gate_up.
template <typename T, bool kVector, typename Act>
__global__ void GatedKernel(const T* __restrict__ gate_up, int n, int h, T* __restrict__ out) {
  constexpr int kStep = kVector ? kVec : 1;
  const Act act;
  const int per_row = h / kStep;
  const int64_t total = static_cast<int64_t>(n) * per_row;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const int64_t r = i / per_row;
    const int c = static_cast<int>(i % per_row) * kStep;
    const T* gate = gate_up + r * 2 * h + c;
    const T* up = gate + h;
    T* o = out + r * h + c;
    if constexpr (kVector) {
      float g[kVec], u[kVec];
      Load8(gate, g);
      Load8(up, u);
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[k] = act(g[k]) * u[k];
      Store8(o, g);
    } else {
      *o = FromF32<T>(act(ToF32(*gate)) * ToF32(*up));
    }
  }
}

__global__ void ScaleF32Kernel(float* __restrict__ x, int64_t count, float s) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) x[i] *= s;
}

__global__ void SoftCapF32Kernel(float* __restrict__ x, int64_t count, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) x[i] = cap * tanhf(x[i] * inv);
}

// ----------------------------------------------------------------- WriteKv

// Grid (n, 2): blockIdx.y = 0 copies K, 1 copies V. A raw copy of 2-byte
// elements; `kVector` moves 16 bytes at a time.
template <bool kVector>
__global__ void WriteKvKernel(const uint16_t* __restrict__ qkv, int stride, int k_offset,
                              int v_offset, int kv_elems, const int32_t* __restrict__ slot_rows,
                              uint16_t* __restrict__ k_cache, uint16_t* __restrict__ v_cache) {
  const int i = blockIdx.x;
  const int32_t slot = slot_rows[i];
  if (slot < 0) return;  // defensive: a negative slot is never written
  const bool is_v = blockIdx.y == 1;
  const uint16_t* src =
      qkv + static_cast<int64_t>(i) * stride + (is_v ? v_offset : k_offset);
  uint16_t* dst = (is_v ? v_cache : k_cache) + static_cast<int64_t>(slot) * kv_elems;
  if constexpr (kVector) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int c = threadIdx.x; c < kv_elems / kVec; c += blockDim.x) d[c] = s[c];
  } else {
    for (int c = threadIdx.x; c < kv_elems; c += blockDim.x) dst[c] = src[c];
  }
}

// ------------------------------------------------------------- conversions

// Element-wise In -> Out through fp32 (one side is fp32, the other bf16/fp16).
template <typename In, typename Out>
__global__ void ConvertKernel(const In* __restrict__ in, int64_t count, Out* __restrict__ out,
                              bool vector) {
  const int64_t tid = GlobalThread(), threads = GridThreads();
  int64_t done = 0;
  if (vector) {
    const int64_t vecs = count / kVec;
    for (int64_t i = tid; i < vecs; i += threads) {
      float v[kVec];
      Load8(in + i * kVec, v);
      Store8(out + i * kVec, v);
    }
    done = vecs * kVec;
  }
  for (int64_t i = done + tid; i < count; i += threads) out[i] = FromF32<Out>(ToF32(in[i]));
}

template <typename In, typename Out>
void LaunchConvert(const In* in, int64_t count, Out* out, cudaStream_t stream) {
  if (count <= 0) return;
  const bool vec = IsAligned(in, 16) && IsAligned(out, 16);
  ConvertKernel<In, Out><<<FlatBlocks(vec ? (count + kVec - 1) / kVec : count), kFlatThreads, 0,
                           stream>>>(in, count, out, vec);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

// ------------------------------------------------------------- random fill

// Element i is the (i+1)-th output of model/splitmix64.h's SplitMix64 from
// state `seed` (its state after i+1 steps is seed + (i+1) * golden gamma),
// so the device fill equals the CPU's sequential stream. u has 24 bits, in
// [0, 1), as in the random-model writer.
__device__ __forceinline__ float SplitMixUniform(uint64_t seed, int64_t i) {
  uint64_t z = seed + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

template <typename T>
__global__ void FillUniformKernel(T* __restrict__ out, int64_t count, uint64_t seed, float scale) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const float u = SplitMixUniform(seed, i);
    // 2u - 1 is exact; one rounding in the product, one in the cast.
    out[i] = FromF32<T>(__fmul_rn(2.0f * u - 1.0f, scale));
  }
}

__global__ void FillUniformF32Kernel(float* __restrict__ out, int64_t count, uint64_t seed,
                                     float lo, float hi) {
  const float width = hi - lo;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    out[i] = __fmaf_rn(SplitMixUniform(seed, i), width, lo);
  }
}

}  // namespace

// ===================================================================== host

void EmbedTokens(DType t, const void* table, const int32_t* tokens, int n, int dim, float* x,
                 cudaStream_t stream) {
  DispatchHalfType(t, "EmbedTokens", [&](auto tag) {
    using T = decltype(tag);
    if (n <= 0 || dim <= 0) return;
    const bool vec = dim % kVec == 0 && IsAligned(table, 16) && IsAligned(x, 16);
    const int threads = std::clamp((dim / (vec ? kVec : 1) + 31) / 32 * 32, 32, 512);
    if (vec) {
      EmbedTokensKernel<T, true><<<n, threads, 0, stream>>>(static_cast<const T*>(table), tokens,
                                                            dim, x);
    } else {
      EmbedTokensKernel<T, false><<<n, threads, 0, stream>>>(static_cast<const T*>(table), tokens,
                                                             dim, x);
    }
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void AddRmsNorm(DType t, float* x, const void* delta, const float* weight, float eps, int n,
                int dim, void* out, cudaStream_t stream) {
  DispatchHalfType(t, "AddRmsNorm", [&](auto tag) {
    using T = decltype(tag);
    if (n <= 0 || dim <= 0) return;
    const T* d = static_cast<const T*>(delta);
    T* o = static_cast<T*>(out);
    const bool vec = dim % kVec == 0 && IsAligned(x, 16) && IsAligned(delta, 16) &&
                     IsAligned(weight, 16) && IsAligned(out, 16);
    const int threads = RowThreads(dim);
    if (vec) {
      AddRmsNormKernel<T, true><<<n, threads, 0, stream>>>(x, d, weight, eps, dim, o);
    } else {
      AddRmsNormKernel<T, false><<<n, threads, 0, stream>>>(x, d, weight, eps, dim, o);
    }
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void AddResidual(DType t, float* x, const void* delta, int64_t count, cudaStream_t stream) {
  DispatchHalfType(t, "AddResidual", [&](auto tag) {
    using T = decltype(tag);
    if (count <= 0) return;
    const bool vec = IsAligned(x, 16) && IsAligned(delta, 16);
    AddResidualKernel<T><<<FlatBlocks(vec ? (count + kVec - 1) / kVec : count), kFlatThreads, 0,
                           stream>>>(x, static_cast<const T*>(delta), count, vec);
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void AddBias(DType t, void* rows, const float* bias, int n_rows, int width, int stride,
             cudaStream_t stream) {
  DispatchHalfType(t, "AddBias", [&](auto tag) {
    using T = decltype(tag);
    if (n_rows <= 0 || width <= 0) return;
    T* r = static_cast<T*>(rows);
    const bool vec = width % kVec == 0 && stride % kVec == 0 && IsAligned(rows, 16) &&
                     IsAligned(bias, 16);
    const int64_t work = static_cast<int64_t>(n_rows) * (vec ? width / kVec : width);
    if (vec) {
      AddBiasKernel<T, true><<<FlatBlocks(work), kFlatThreads, 0, stream>>>(r, bias, n_rows,
                                                                            width, stride);
    } else {
      AddBiasKernel<T, false><<<FlatBlocks(work), kFlatThreads, 0, stream>>>(r, bias, n_rows,
                                                                             width, stride);
    }
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void HeadRmsNorm(DType t, void* rows, const float* weight, float eps, int n_rows, int heads,
                 int head_dim, int stride, cudaStream_t stream) {
  DispatchHalfType(t, "HeadRmsNorm", [&](auto tag) {
    using T = decltype(tag);
    if (n_rows <= 0 || heads <= 0 || head_dim <= 0) return;
    T* r = static_cast<T*>(rows);
    const bool vec = head_dim % kVec == 0 && stride % kVec == 0 && IsAligned(rows, 16) &&
                     IsAligned(weight, 16);
    const int64_t total_heads = static_cast<int64_t>(n_rows) * heads;
    const int blocks = static_cast<int>((total_heads + kHeadWarps - 1) / kHeadWarps);
    if (vec) {
      HeadRmsNormKernel<T, true><<<blocks, 32 * kHeadWarps, 0, stream>>>(
          r, weight, eps, n_rows, heads, head_dim, stride);
    } else {
      HeadRmsNormKernel<T, false><<<blocks, 32 * kHeadWarps, 0, stream>>>(
          r, weight, eps, n_rows, heads, head_dim, stride);
    }
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void ApplyRope(DType t, void* rows, int n_rows, int heads, int head_dim, int stride,
               const float* cos, const float* sin, bool interleaved, cudaStream_t stream,
               int rot_dim) {
  DispatchHalfType(t, "ApplyRope", [&](auto tag) {
    using T = decltype(tag);
    if (rot_dim <= 0) rot_dim = head_dim;
    if (n_rows <= 0 || heads <= 0 || head_dim < 2 || rot_dim < 2) return;
    if (rot_dim > head_dim || rot_dim % 2 != 0) {
      throw std::invalid_argument("ApplyRope: rot_dim must be even and at most head_dim");
    }
    const int64_t pairs = static_cast<int64_t>(n_rows) * heads * (rot_dim / 2);
    RopeKernel<T><<<FlatBlocks(pairs), kFlatThreads, 0, stream>>>(
        static_cast<T*>(rows), n_rows, heads, head_dim, stride, cos, sin, interleaved, rot_dim);
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

namespace {
template <typename Act>
void Gated(DType t, const char* name, const void* gate_up, int n, int h, void* out,
           cudaStream_t stream) {
  DispatchHalfType(t, name, [&](auto tag) {
    using T = decltype(tag);
    if (n <= 0 || h <= 0) return;
    const T* in = static_cast<const T*>(gate_up);
    T* o = static_cast<T*>(out);
    const bool vec = h % kVec == 0 && IsAligned(gate_up, 16) && IsAligned(out, 16);
    const int64_t work = static_cast<int64_t>(n) * (vec ? h / kVec : h);
    if (vec) {
      GatedKernel<T, true, Act><<<FlatBlocks(work), kFlatThreads, 0, stream>>>(in, n, h, o);
    } else {
      GatedKernel<T, false, Act><<<FlatBlocks(work), kFlatThreads, 0, stream>>>(in, n, h, o);
    }
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}
}  // namespace

void SwiGlu(DType t, const void* gate_up, int n, int h, void* out, cudaStream_t stream) {
  Gated<SiluAct>(t, "SwiGlu", gate_up, n, h, out, stream);
}

void GeGlu(DType t, const void* gate_up, int n, int h, void* out, cudaStream_t stream) {
  Gated<GeluTanhAct>(t, "GeGlu", gate_up, n, h, out, stream);
}

void ScaleF32(float* x, int64_t count, float s, cudaStream_t stream) {
  if (count <= 0) return;
  ScaleF32Kernel<<<FlatBlocks(count), kFlatThreads, 0, stream>>>(x, count, s);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

void SoftCapF32(float* x, int64_t count, float cap, cudaStream_t stream) {
  if (count <= 0 || cap <= 0.0f) return;
  SoftCapF32Kernel<<<FlatBlocks(count), kFlatThreads, 0, stream>>>(x, count, cap);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

void WriteKv(DType t, const void* qkv, int n, int stride, int k_offset, int v_offset,
             int kv_elems, const int32_t* slot_rows, void* k_cache, void* v_cache,
             cudaStream_t stream) {
  DispatchHalfType(t, "WriteKv", [&](auto) {
    if (n <= 0 || kv_elems <= 0) return;
    const auto* src = static_cast<const uint16_t*>(qkv);
    auto* kc = static_cast<uint16_t*>(k_cache);
    auto* vc = static_cast<uint16_t*>(v_cache);
    const bool vec = kv_elems % kVec == 0 && stride % kVec == 0 && k_offset % kVec == 0 &&
                     v_offset % kVec == 0 && IsAligned(qkv, 16) && IsAligned(k_cache, 16) &&
                     IsAligned(v_cache, 16);
    const int threads = std::clamp((kv_elems / (vec ? kVec : 1) + 31) / 32 * 32, 32, 256);
    const dim3 grid(n, 2);
    if (vec) {
      WriteKvKernel<true><<<grid, threads, 0, stream>>>(src, stride, k_offset, v_offset, kv_elems,
                                                        slot_rows, kc, vc);
    } else {
      WriteKvKernel<false><<<grid, threads, 0, stream>>>(src, stride, k_offset, v_offset,
                                                         kv_elems, slot_rows, kc, vc);
    }
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void ToFloat(DType t, const void* in, int64_t count, float* out, cudaStream_t stream) {
  DispatchHalfType(t, "ToFloat", [&](auto tag) {
    using T = decltype(tag);
    LaunchConvert(static_cast<const T*>(in), count, out, stream);
  });
}

void FromFloat(DType t, const float* in, int64_t count, void* out, cudaStream_t stream) {
  DispatchHalfType(t, "FromFloat", [&](auto tag) {
    using T = decltype(tag);
    LaunchConvert(in, count, static_cast<T*>(out), stream);
  });
}

void FillUniform(DType t, void* out, int64_t count, uint64_t seed, float scale,
                 cudaStream_t stream) {
  DispatchHalfType(t, "FillUniform", [&](auto tag) {
    using T = decltype(tag);
    if (count <= 0) return;
    FillUniformKernel<T><<<FlatBlocks(count), kFlatThreads, 0, stream>>>(static_cast<T*>(out),
                                                                         count, seed, scale);
    SPECLINE_CUDA_CHECK_LAUNCH();
  });
}

void FillUniformF32(float* out, int64_t count, uint64_t seed, float lo, float hi,
                    cudaStream_t stream) {
  if (count <= 0) return;
  FillUniformF32Kernel<<<FlatBlocks(count), kFlatThreads, 0, stream>>>(out, count, seed, lo, hi);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

}  // namespace specline::cuda
