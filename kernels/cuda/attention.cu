// Paged attention over one layer's KV cache (ops.h, "attention").
//
// Decode (flash-decoding, split-K):
//   DecodeSplitKernel   grid (rows, n_kv_heads * head-chunks, splits), 128 threads.
//     One block reduces one split (split_len consecutive keys) of one row for
//     up to G (1, 4 or 8) query heads that share a KV head (GQA), so each K/V
//     row is read once for all of them. K and V rows are read with 16-byte
//     loads (head_dim % 8 == 0) by "teams" of head_dim / 8 threads, 8 key
//     rows per thread in flight (4 when G = 8). Scores live in shared memory;
//     the split's softmax max / sum and its unnormalised output go to the
//     fp32 workspace.
//   DecodeCombineKernel grid (rows, n_heads), 256 threads: merges the splits
//     that hold keys (ceil(row_len / split_len) of them): global max, then
//     a weighted sum, the splits spread over the warps.
//   The split length depends only on (n, n_heads, max_len) (DecodeSplits):
//   512 keys, halved (down to 64) while n * n_heads * splits < 2048, so one
//   row of 32 heads at 4K context gets 64 splits of 64 keys (512 blocks with
//   8 KV heads). With one split the first kernel writes the output itself
//   and no combine runs.
//
// Prefill (flash attention, online softmax), one block per (tile, query head):
//   head_dim 64 / 128 with 16-byte aligned caches: tensor cores (nvcuda::wmma
//   m16n16k16, bf16/fp16 inputs, fp32 accumulators). 4 warps, warp w owns
//   query rows [16w, 16w + 16) of the tile; 64-key K/V tiles are staged in
//   shared memory and shared by the 4 warps; S = Q K^T and O += P V on tensor
//   cores; the running output O is kept in shared memory (fp32) so the
//   per-row rescale needs no knowledge of the fragment layout.
//   Other head_dims (or unaligned caches): a CUDA-core tiled version (16-row
//   groups, 16-key tiles).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace specline::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplitLen = 512;
constexpr int kMinSplitLen = 64;

// ------------------------------------------------------------ small helpers

__device__ __forceinline__ float NegInf() { return __int_as_float(0xff800000u); }

template <typename T>
__device__ __forceinline__ float BitsToFloat(uint16_t b);
template <>
__device__ __forceinline__ float BitsToFloat<__nv_bfloat16>(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
template <>
__device__ __forceinline__ float BitsToFloat<__half>(uint16_t b) {
  return __half2float(__ushort_as_half(b));
}

template <typename T>
__device__ __forceinline__ uint16_t FloatToBits(float f);
template <>
__device__ __forceinline__ uint16_t FloatToBits<__nv_bfloat16>(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
template <>
__device__ __forceinline__ uint16_t FloatToBits<__half>(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

// Two packed elements (the first in the low half) as floats.
template <typename T>
__device__ __forceinline__ float2 Unpack2(uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  } else {
    return make_float2(__half2float(__ushort_as_half(static_cast<uint16_t>(w & 0xffffu))),
                       __half2float(__ushort_as_half(static_cast<uint16_t>(w >> 16))));
  }
}

// VEC consecutive 16-bit elements: one 16-byte load (VEC 8) or one 4-byte load (VEC 2).
template <int VEC>
struct Chunk {
  uint32_t w[VEC / 2];
};
template <int VEC>
__device__ __forceinline__ Chunk<VEC> LoadChunk(const uint16_t* p) {
  Chunk<VEC> c;
  if constexpr (VEC == 8) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    c.w[0] = v.x;
    c.w[1] = v.y;
    c.w[2] = v.z;
    c.w[3] = v.w;
  } else {
    static_assert(VEC == 2, "VEC is 8 or 2");
    c.w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
  return c;
}
template <int VEC>
__device__ __forceinline__ Chunk<VEC> ZeroChunk() {
  Chunk<VEC> c;
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) c.w[i] = 0;
  return c;
}


// Element offset of cache row (position p of a sequence, KV head kvh).
__device__ __forceinline__ int64_t CacheOffset(const int32_t* bt, int p, int block_size,
                                               int n_kv_heads, int kvh, int head_dim) {
  const int blk = bt[p / block_size];
  const int64_t slot = static_cast<int64_t>(blk) * block_size + p % block_size;
  return (slot * n_kv_heads + kvh) * head_dim;
}

// ------------------------------------------------------------------- decode

// What both attention kernels read of PagedAttentionParams.
struct PagedArgs {
  const uint16_t* q;
  int64_t q_stride;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* block_tables;
  int64_t max_blocks;
  const int32_t* row_seq;
  const int32_t* row_len;
  uint16_t* out;
  int n_heads;
  int n_kv_heads;
  int head_dim;
  int block_size;
  int group;  // n_heads / n_kv_heads
  float scale;
  int window;     // 0: every key up to the row's position
  float softcap;  // 0: none
};

// The score of a q.k dot product: scaled, then soft-capped (Gemma 2).
__device__ __forceinline__ float ScoreOf(float dot, const PagedArgs& a) {
  const float s = dot * a.scale;
  return a.softcap > 0.0f ? a.softcap * tanhf(s / a.softcap) : s;
}

// The first key a row of `len` keys attends to (its sliding window's start).
__device__ __forceinline__ int WindowStart(const PagedArgs& a, int len) {
  return a.window > 0 ? max(0, len - a.window) : 0;
}

void FillPagedArgs(const PagedAttentionParams& p, PagedArgs& a) {
  a.q = static_cast<const uint16_t*>(p.q);
  a.q_stride = p.q_stride;
  a.k = static_cast<const uint16_t*>(p.k_cache);
  a.v = static_cast<const uint16_t*>(p.v_cache);
  a.block_tables = p.block_tables;
  a.max_blocks = p.max_blocks;
  a.row_seq = p.row_seq;
  a.row_len = p.row_len;
  a.out = static_cast<uint16_t*>(p.out);
  a.n_heads = p.n_heads;
  a.n_kv_heads = p.n_kv_heads;
  a.head_dim = p.head_dim;
  a.block_size = p.block_size;
  a.group = p.n_heads / p.n_kv_heads;
  a.scale = p.scale;
  a.window = p.window;
  a.softcap = p.softcap;
}

struct DecodeArgs : PagedArgs {
  const int32_t* rows;  // nullptr: blockIdx.x is the row
  float* ws_o;   // [n][n_heads][splits][head_dim]
  float* ws_ml;  // [n][n_heads][splits][2]: max, sum
  int chunks_per_kv;   // ceil(group / G) blocks per KV head
  int split_len;
  int num_splits;
  int max_len;
};

struct SplitPlan {
  int split_len;
  int num_splits;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Depends only on (n, n_heads, max_len): the decode grid must not change as
// sequences grow (CUDA graphs).
SplitPlan DecodeSplits(int n, int n_heads, int max_len) {
  int split_len = kMaxSplitLen;
  while (split_len > kMinSplitLen &&
         static_cast<int64_t>(n) * n_heads * CeilDiv(max_len, split_len) < 2048) {
    split_len /= 2;
  }
  return {split_len, static_cast<int>(CeilDiv(max_len, split_len))};
}

// VEC elements per load, TS threads per key ("team"; a power of two <= 32),
// NC loads per thread per key row, DFIX the compile-time head_dim (0: runtime,
// <= kMaxHeadDim), G the most query heads per block.
template <typename T, int VEC, int TS, int NC, int DFIX, int G>
__global__ void __launch_bounds__(kThreads) DecodeSplitKernel(const DecodeArgs a) {
  constexpr int kDMax = DFIX > 0 ? DFIX : kMaxHeadDim;
  constexpr int kKeysPerPass = kThreads / TS;
  constexpr int kUnroll = G <= 4 ? 8 : 4;  // key rows per thread in flight
  constexpr int kEpt = VEC * NC;  // elements of a row per thread
  constexpr int kScores = G * kMaxSplitLen;
  constexpr int kRed = kWarps * G * kDMax;
  static_assert(TS <= 32 && (TS & (TS - 1)) == 0, "team is a power of two within a warp");
  __shared__ __align__(16) float s_buf[kScores > kRed ? kScores : kRed];
  __shared__ float s_q[G * kDMax];
  __shared__ float s_m[G];
  __shared__ float s_l[G];

  const int D = DFIX > 0 ? DFIX : a.head_dim;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int slot = tid / TS;
  const int tl = tid % TS;

  const int row = a.rows != nullptr ? a.rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int kvh = blockIdx.y / a.chunks_per_kv;
  const int hc = (blockIdx.y % a.chunks_per_kv) * G;
  const int h0 = kvh * a.group + hc;
  const int gb = min(G, a.group - hc);
  const int split = blockIdx.z;
  const int len = min(a.row_len[row], a.max_len);
  const int s0 = split * a.split_len;
  if (split > 0 && s0 >= len) return;  // no keys here (block-uniform)
  const int cnt = max(0, min(len - s0, a.split_len));
  const int lo = WindowStart(a, len);
  // Splits wholly before the window hold no visible key; the combine skips
  // them too (block-uniform).
  if (a.num_splits > 1 && s0 + a.split_len <= lo) return;
  const int32_t* bt = a.block_tables + static_cast<int64_t>(a.row_seq[row]) * a.max_blocks;

  // Queries of heads h0 .. h0 + gb (contiguous in the row) as fp32.
  const uint16_t* qrow = a.q + static_cast<int64_t>(row) * a.q_stride +
                         static_cast<int64_t>(h0) * D;
  for (int i = tid; i < gb * D; i += kThreads) s_q[i] = BitsToFloat<T>(qrow[i]);
  __syncthreads();
  float qf[G][kEpt];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int j = 0; j < NC; ++j) {
      const int d0 = (tl + TS * j) * VEC;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        qf[g][j * VEC + e] = (g < gb && d0 < D) ? s_q[g * D + d0 + e] : 0.0f;
      }
    }
  }

  // Rows s0 + base + u * kKeysPerPass + slot of K or V, this thread's chunks.
  const auto load_rows = [&](const uint16_t* cache, int base, Chunk<VEC> (&raw)[kUnroll][NC]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + u * kKeysPerPass + slot;
      const uint16_t* rp = nullptr;
      if (k < cnt) rp = cache + CacheOffset(bt, s0 + k, a.block_size, a.n_kv_heads, kvh, D);
#pragma unroll
      for (int j = 0; j < NC; ++j) {
        const int d0 = (tl + TS * j) * VEC;
        raw[u][j] = (rp != nullptr && d0 < D) ? LoadChunk<VEC>(rp + d0) : ZeroChunk<VEC>();
      }
    }
  };
  constexpr int kRound = kKeysPerPass * kUnroll;  // keys per load round

  // Phase 1: scores[g][k] = scale * q_g . K[s0 + k]. (Loading the first
  // round's V rows here too was tried: the extra registers cost more
  // occupancy than the overlap gained.)
  float* s_sc = s_buf;  // [G][kMaxSplitLen]
  for (int base = 0; base < cnt; base += kRound) {
    Chunk<VEC> raw[kUnroll][NC];
    load_rows(a.k, base, raw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float part[G];
#pragma unroll
      for (int g = 0; g < G; ++g) part[g] = 0.0f;
#pragma unroll
      for (int j = 0; j < NC; ++j) {
#pragma unroll
        for (int w = 0; w < VEC / 2; ++w) {
          const float2 f = Unpack2<T>(raw[u][j].w[w]);
#pragma unroll
          for (int g = 0; g < G; ++g) {
            if (g < gb) {
              part[g] = fmaf(qf[g][j * VEC + 2 * w], f.x, part[g]);
              part[g] = fmaf(qf[g][j * VEC + 2 * w + 1], f.y, part[g]);
            }
          }
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g < gb) {  // block-uniform: every lane shuffles
#pragma unroll
          for (int o = TS / 2; o > 0; o >>= 1) {
            part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
          }
        }
      }
      const int k = base + u * kKeysPerPass + slot;
      if (tl == 0 && k < cnt) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
          if (g < gb) s_sc[g * kMaxSplitLen + k] = s0 + k >= lo ? ScoreOf(part[g], a) : NegInf();
        }
      }
    }
  }
  __syncthreads();

  // Phase 2: softmax of the split, one warp per head.
  for (int g = warp; g < gb; g += kWarps) {
    float* sc = s_sc + g * kMaxSplitLen;
    float m = NegInf();
    for (int k = lane; k < cnt; k += 32) m = fmaxf(m, sc[k]);
    m = WarpMax(m);
    // Keys before the window are -inf: weight 0 (m is finite: a split that
    // runs holds a visible key).
    float l = 0.0f;
    for (int k = lane; k < cnt; k += 32) {
      const float p = sc[k] == NegInf() ? 0.0f : __expf(sc[k] - m);
      sc[k] = p;
      l += p;
    }
    l = WarpSum(l);
    if (lane == 0) {
      s_m[g] = m;
      s_l[g] = l;
    }
  }
  __syncthreads();

  // Phase 3: acc[g][:] = sum_k p[g][k] * V[s0 + k][:] over this thread's keys.
  float acc[G][kEpt];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < kEpt; ++e) acc[g][e] = 0.0f;
  }
  const auto accumulate = [&](int base, const Chunk<VEC> (&raw)[kUnroll][NC]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = base + u * kKeysPerPass + slot;
      if (k < cnt) {
        float p[G];
#pragma unroll
        for (int g = 0; g < G; ++g) p[g] = g < gb ? s_sc[g * kMaxSplitLen + k] : 0.0f;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
#pragma unroll
          for (int w = 0; w < VEC / 2; ++w) {
            const float2 f = Unpack2<T>(raw[u][j].w[w]);
#pragma unroll
            for (int g = 0; g < G; ++g) {
              if (g < gb) {
                acc[g][j * VEC + 2 * w] = fmaf(p[g], f.x, acc[g][j * VEC + 2 * w]);
                acc[g][j * VEC + 2 * w + 1] = fmaf(p[g], f.y, acc[g][j * VEC + 2 * w + 1]);
              }
            }
          }
        }
      }
    }
  };
  for (int base = 0; base < cnt; base += kRound) {
    Chunk<VEC> raw[kUnroll][NC];
    load_rows(a.v, base, raw);
    accumulate(base, raw);
  }
  // Sum the teams of a warp (lanes tl, tl + TS, ...), then the warps.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < gb) {
#pragma unroll
      for (int o = TS; o < 32; o <<= 1) {
#pragma unroll
        for (int e = 0; e < kEpt; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
      }
    }
  }
  __syncthreads();  // s_sc is dead: reuse s_buf for the cross-warp sum
  float* s_red = s_buf;  // [kWarps][G][D]
  if (lane < TS) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g < gb) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
          const int d0 = (tl + TS * j) * VEC;
          if (d0 < D) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) s_red[(warp * G + g) * D + d0 + e] = acc[g][j * VEC + e];
          }
        }
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < gb * D; i += kThreads) {
    const int g = i / D;
    const int d = i - g * D;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_red[(w * G + g) * D + d];
    const int h = h0 + g;
    if (a.num_splits == 1) {
      const float l = s_l[g];
      a.out[(static_cast<int64_t>(row) * a.n_heads + h) * D + d] =
          FloatToBits<T>(l > 0.0f ? sum * __frcp_rn(l) : 0.0f);
    } else {
      const int64_t at = (static_cast<int64_t>(row) * a.n_heads + h) * a.num_splits + split;
      a.ws_o[at * D + d] = sum;
      if (d == 0) {
        a.ws_ml[2 * at] = s_m[g];
        a.ws_ml[2 * at + 1] = s_l[g];
      }
    }
  }
}

// Merges the splits of one (row, head) that hold keys: the global max first
// (threads over splits), then each warp sums a share of the splits (lanes over
// head_dim, 2 elements per load) and the warps' sums are added.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) DecodeCombineKernel(const DecodeArgs a) {
  constexpr int kPairs = kMaxHeadDim / 64;  // element pairs per lane
  __shared__ float s_max[kCombineWarps];
  __shared__ float s_sum[kCombineWarps];
  __shared__ float s_acc[kCombineWarps * kMaxHeadDim];
  const int row = a.rows != nullptr ? a.rows[blockIdx.x] : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y;
  const int D = a.head_dim;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int len = min(a.row_len[row], a.max_len);
  const int ns = len > 0 ? min((len + a.split_len - 1) / a.split_len, a.num_splits) : 0;
  const int s_first = WindowStart(a, len) / a.split_len;  // splits before it did not run
  const int64_t base = (static_cast<int64_t>(row) * a.n_heads + h) * a.num_splits;
  const float2* ml = reinterpret_cast<const float2*>(a.ws_ml + 2 * base);  // (max, sum)
  const float* o = a.ws_o + base * D;

  float m = NegInf();
  for (int s = s_first + tid; s < ns; s += kCombineThreads) m = fmaxf(m, ml[s].x);
  m = WarpMax(m);
  if (lane == 0) s_max[warp] = m;
  __syncthreads();
  m = s_max[0];
#pragma unroll
  for (int w = 1; w < kCombineWarps; ++w) m = fmaxf(m, s_max[w]);
  // Splits that hold keys have a finite max; -inf only when ns == 0 (or a
  // row_len <= 0), and then the output is 0.
  const float m_use = m == NegInf() ? 0.0f : m;

  float l = 0.0f;
  float2 acc[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) acc[j] = make_float2(0.0f, 0.0f);
#pragma unroll 2
  for (int s = s_first + warp; s < ns; s += kCombineWarps) {
    const float2 st = ml[s];
    const float w = __expf(st.x - m_use);
    l = fmaf(st.y, w, l);
    const float2* os = reinterpret_cast<const float2*>(o + static_cast<int64_t>(s) * D);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int pr = lane + 32 * j;
      if (2 * pr < D) {
        const float2 v = os[pr];
        acc[j].x = fmaf(v.x, w, acc[j].x);
        acc[j].y = fmaf(v.y, w, acc[j].y);
      }
    }
  }
  if (lane == 0) s_sum[warp] = l;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int pr = lane + 32 * j;
    if (2 * pr < D) {
      s_acc[warp * D + 2 * pr] = acc[j].x;
      s_acc[warp * D + 2 * pr + 1] = acc[j].y;
    }
  }
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) total += s_sum[w];
  const float inv = total > 0.0f ? __frcp_rn(total) : 0.0f;
  for (int d = tid; d < D; d += kCombineThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) sum += s_acc[w * D + d];
    a.out[(static_cast<int64_t>(row) * a.n_heads + h) * D + d] = FloatToBits<T>(sum * inv);
  }
}

// ------------------------------------------------------------------ prefill

struct PrefillArgs : PagedArgs {
  const int32_t* tile_first_row;
  const int32_t* tile_rows;
  bool q_vec;  // q rows are 16-byte aligned: q % 16 == 0 and q_stride % 8 == 0
};

constexpr int kTileRows = kPrefillTileRows;  // 64 = 4 warps x 16 rows
static_assert(kTileRows == 4 * 16, "the wmma prefill gives each of 4 warps 16 query rows");

// Shared-memory layout of the wmma prefill kernel (byte offsets; every
// region and every 16-row fragment start is 32-byte aligned, as wmma needs).
template <int D>
struct WmmaLayout {
  static constexpr int kKt = 64;      // keys per tile
  static constexpr int kLdh = D + 8;  // K, V (and the staged Q) rows, in elements
  static constexpr int kLds = kKt + 4;
  static constexpr int kLdp = kKt + 8;
  static constexpr int kLdo = D + 4;
  static constexpr size_t kK = 0;
  static constexpr size_t kV = kK + size_t{kKt} * kLdh * 2;
  static constexpr size_t kS = kV + size_t{kKt} * kLdh * 2;
  static constexpr size_t kP = kS + size_t{kTileRows} * kLds * 4;
  static constexpr size_t kO = kP + size_t{kTileRows} * kLdp * 2;
  static constexpr size_t kLen = kO + size_t{kTileRows} * kLdo * 4;
  static constexpr size_t kSum = kLen + size_t{kTileRows} * 4;
  static constexpr size_t kBytes = kSum + size_t{kTileRows} * 4;
  static_assert(kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0 && kO % 32 == 0, "alignment");
  static_assert((16 * kLdh * 2) % 32 == 0 && (16 * kLds * 4) % 32 == 0 &&
                    (16 * kLdp * 2) % 32 == 0 && (16 * kLdo * 4) % 32 == 0,
                "fragment rows");
  static_assert(size_t{kTileRows} * kLdh * 2 <= size_t{kTileRows} * kLdo * 4,
                "Q is staged in the O region");
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) PrefillWmmaKernel(const PrefillArgs a) {
  namespace wmma = nvcuda::wmma;
  using L = WmmaLayout<D>;
  constexpr int kKt = L::kKt;
  constexpr int kCpr = D / 8;  // 16-byte chunks per row
  constexpr int kIter = kKt * kCpr / kThreads;
  static_assert(kKt * kCpr % kThreads == 0, "K/V tile load split");
  static_assert(kKt == 64, "softmax gives each lane 32 keys of a row");
  extern __shared__ __align__(128) unsigned char smem[];
  T* s_k = reinterpret_cast<T*>(smem + L::kK);
  T* s_v = reinterpret_cast<T*>(smem + L::kV);
  float* s_s = reinterpret_cast<float*>(smem + L::kS);
  T* s_p = reinterpret_cast<T*>(smem + L::kP);
  float* s_o = reinterpret_cast<float*>(smem + L::kO);
  T* s_qst = reinterpret_cast<T*>(smem + L::kO);  // Q staging, before O is used
  int* s_len = reinterpret_cast<int*>(smem + L::kLen);
  float* s_sum = reinterpret_cast<float*>(smem + L::kSum);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int tile = blockIdx.x;
  const int h = blockIdx.y;
  const int first = a.tile_first_row[tile];
  const int nr = min(a.tile_rows[tile], kTileRows);
  if (nr <= 0) return;  // block-uniform
  const int kvh = h / a.group;
  const int32_t* bt = a.block_tables + static_cast<int64_t>(a.row_seq[first]) * a.max_blocks;

  if (tid < kTileRows) s_len[tid] = tid < nr ? a.row_len[first + tid] : 0;
  for (int i = tid; i < kTileRows * kCpr; i += kThreads) {
    const int r = i / kCpr;
    const int c = i - r * kCpr;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < nr) {
      const uint16_t* src =
          a.q + static_cast<int64_t>(first + r) * a.q_stride + static_cast<int64_t>(h) * D + c * 8;
      if (a.q_vec) {
        val = __ldg(reinterpret_cast<const uint4*>(src));
      } else {
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          w[e] = static_cast<uint32_t>(src[2 * e]) | (static_cast<uint32_t>(src[2 * e + 1]) << 16);
        }
        val = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    *reinterpret_cast<uint4*>(s_qst + r * L::kLdh + c * 8) = val;
  }
  __syncthreads();

  int tlen = 0;  // keys any row of the tile sees
  for (int r = 0; r < kTileRows; ++r) tlen = max(tlen, s_len[r]);
  // Key tiles wholly before every row's sliding window are skipped: masked
  // for all rows, they would change no state (block-uniform bound).
  int tlo = tlen;
  for (int r = 0; r < nr; ++r) tlo = min(tlo, WindowStart(a, s_len[r]));
  int wlen = 0;  // keys any row of this warp sees
  for (int r = 0; r < 16; ++r) wlen = max(wlen, s_len[warp * 16 + r]);

  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa[D / 16];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wmma::load_matrix_sync(qa[kk], s_qst + warp * 16 * L::kLdh + kk * 16, L::kLdh);
  }
  __syncthreads();  // the staging area becomes O
  for (int i = lane; i < 16 * D; i += 32) s_o[(warp * 16 + i / D) * L::kLdo + i % D] = 0.0f;

  // Softmax state: lanes 2r and 2r + 1 share row r of the warp's 16; lane
  // half hf takes keys 2c + hf of each tile and columns 2c + hf of O.
  const int rr = lane >> 1;
  const int hf = lane & 1;
  const int my_row = warp * 16 + rr;
  const int my_len = s_len[my_row];
  float m_i = NegInf();
  float l_i = 0.0f;
  __syncwarp();

  for (int kt0 = tlo / kKt * kKt; kt0 < tlen; kt0 += kKt) {
    __syncthreads();  // every warp is done with the previous K/V tile
    uint4 kr[kIter];
    uint4 vr[kIter];
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      const int i = tid + it * kThreads;
      const int kk = i / kCpr;
      const int c = i - kk * kCpr;
      const int p = kt0 + kk;
      if (p < tlen) {
        const int64_t off = CacheOffset(bt, p, a.block_size, a.n_kv_heads, kvh, D) + c * 8;
        kr[it] = __ldg(reinterpret_cast<const uint4*>(a.k + off));
        vr[it] = __ldg(reinterpret_cast<const uint4*>(a.v + off));
      } else {
        kr[it] = make_uint4(0, 0, 0, 0);  // zeros: P is 0 there, and 0 * 0 stays 0
        vr[it] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      const int i = tid + it * kThreads;
      const int kk = i / kCpr;
      const int c = i - kk * kCpr;
      *reinterpret_cast<uint4*>(s_k + kk * L::kLdh + c * 8) = kr[it];
      *reinterpret_cast<uint4*>(s_v + kk * L::kLdh + c * 8) = vr[it];
    }
    __syncthreads();
    if (kt0 >= wlen) continue;  // warp-uniform: every row of this warp is masked here

    // S = Q K^T for the warp's 16 rows.
#pragma unroll
    for (int n = 0; n < kKt / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
      wmma::fill_fragment(sacc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, s_k + n * 16 * L::kLdh + kk * 16, L::kLdh);
        wmma::mma_sync(sacc, qa[kk], kb, sacc);
      }
      wmma::store_matrix_sync(s_s + warp * 16 * L::kLds + n * 16, sacc, L::kLds,
                              wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax for row my_row over this tile's keys.
    const float* srow = s_s + my_row * L::kLds;
    T* prow = s_p + my_row * L::kLdp;
    const int lim = my_len - kt0;  // keys [first, lim) of the tile are visible
    const int first_key = WindowStart(a, my_len) - kt0;
    float mx = NegInf();
#pragma unroll
    for (int c = 0; c < kKt / 2; ++c) {
      const int key = 2 * c + hf;
      if (key < lim && key >= first_key) mx = fmaxf(mx, ScoreOf(srow[key], a));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m_i, mx);
    const float m_use = m_new == NegInf() ? 0.0f : m_new;
    const float alpha = __expf(m_i - m_use);  // 0 while m_i is -inf
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kKt / 2; ++c) {
      const int key = 2 * c + hf;
      const float p = key < lim && key >= first_key ? __expf(ScoreOf(srow[key], a) - m_use) : 0.0f;
      sum += p;
      reinterpret_cast<uint16_t*>(prow)[key] = FloatToBits<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_i = l_i * alpha + sum;
    m_i = m_new;
    float* orow = s_o + my_row * L::kLdo;
#pragma unroll
    for (int c = 0; c < D / 2; ++c) orow[2 * c + hf] *= alpha;
    __syncwarp();

    // O += P V.
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa[kKt / 16];
#pragma unroll
    for (int kk = 0; kk < kKt / 16; ++kk) {
      wmma::load_matrix_sync(pa[kk], s_p + warp * 16 * L::kLdp + kk * 16, L::kLdp);
    }
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc;
      float* optr = s_o + warp * 16 * L::kLdo + dn * 16;
      wmma::load_matrix_sync(oacc, optr, L::kLdo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kKt / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
        wmma::load_matrix_sync(vb, s_v + kk * 16 * L::kLdh + dn * 16, L::kLdh);
        wmma::mma_sync(oacc, pa[kk], vb, oacc);
      }
      wmma::store_matrix_sync(optr, oacc, L::kLdo, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (hf == 0) s_sum[my_row] = l_i;
  __syncwarp();
  const int64_t out_stride = static_cast<int64_t>(a.n_heads) * D;
  for (int i = lane; i < 16 * D; i += 32) {
    const int r = warp * 16 + i / D;
    const int d = i % D;
    if (r < nr) {
      const float l = s_sum[r];
      const float o = l > 0.0f ? s_o[r * L::kLdo + d] * __frcp_rn(l) : 0.0f;
      a.out[static_cast<int64_t>(first + r) * out_stride + static_cast<int64_t>(h) * D + d] =
          FloatToBits<T>(o);
    }
  }
}

// CUDA-core fallback: any even head_dim <= 256, any alignment. The tile's
// rows are taken 16 at a time, the keys 16 at a time.
constexpr int kGenRows = 16;
constexpr int kGenKeys = 16;

template <typename T>
__global__ void __launch_bounds__(kThreads) PrefillGenericKernel(const PrefillArgs a) {
  __shared__ uint16_t s_q[kGenRows * kMaxHeadDim];
  __shared__ uint16_t s_k[kGenKeys * kMaxHeadDim];
  __shared__ uint16_t s_v[kGenKeys * kMaxHeadDim];
  __shared__ float s_o[kGenRows * kMaxHeadDim];
  __shared__ float s_p[kGenRows * kGenKeys];
  __shared__ float s_m[kGenRows];
  __shared__ float s_l[kGenRows];
  __shared__ float s_alpha[kGenRows];
  __shared__ int s_len[kGenRows];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int D = a.head_dim;
  const int tile = blockIdx.x;
  const int h = blockIdx.y;
  const int first = a.tile_first_row[tile];
  const int nr = min(a.tile_rows[tile], kTileRows);
  if (nr <= 0) return;
  const int kvh = h / a.group;
  const int32_t* bt = a.block_tables + static_cast<int64_t>(a.row_seq[first]) * a.max_blocks;
  const int64_t out_stride = static_cast<int64_t>(a.n_heads) * D;

  for (int g0 = 0; g0 < nr; g0 += kGenRows) {
    const int rows_here = min(kGenRows, nr - g0);
    __syncthreads();  // the previous group is done with shared memory
    for (int i = tid; i < kGenRows * D; i += kThreads) {
      const int r = i / D;
      const int d = i - r * D;
      s_q[i] = r < rows_here ? a.q[static_cast<int64_t>(first + g0 + r) * a.q_stride +
                                   static_cast<int64_t>(h) * D + d]
                             : uint16_t{0};
      s_o[i] = 0.0f;
    }
    if (tid < kGenRows) {
      s_len[tid] = tid < rows_here ? a.row_len[first + g0 + tid] : 0;
      s_m[tid] = NegInf();
      s_l[tid] = 0.0f;
    }
    __syncthreads();
    int glen = 0;
    for (int r = 0; r < kGenRows; ++r) glen = max(glen, s_len[r]);
    int glo = glen;  // the group's earliest window start: key tiles before it are skipped
    for (int r = 0; r < rows_here; ++r) glo = min(glo, WindowStart(a, s_len[r]));

    for (int kt0 = glo / kGenKeys * kGenKeys; kt0 < glen; kt0 += kGenKeys) {
      const int nk = min(kGenKeys, glen - kt0);
      __syncthreads();  // previous K/V tile and probabilities consumed
      for (int i = tid; i < kGenKeys * D; i += kThreads) {
        const int kk = i / D;
        const int d = i - kk * D;
        uint16_t kb = 0;
        uint16_t vb = 0;
        if (kk < nk) {
          const int64_t off = CacheOffset(bt, kt0 + kk, a.block_size, a.n_kv_heads, kvh, D) + d;
          kb = a.k[off];
          vb = a.v[off];
        }
        s_k[i] = kb;
        s_v[i] = vb;
      }
      __syncthreads();
      for (int i = tid; i < kGenRows * kGenKeys; i += kThreads) {
        const int r = i / kGenKeys;
        const int kk = i - r * kGenKeys;
        float s = NegInf();
        if (kt0 + kk < s_len[r] && kt0 + kk >= WindowStart(a, s_len[r])) {
          float dot = 0.0f;
          for (int d = 0; d < D; ++d) {
            dot = fmaf(BitsToFloat<T>(s_q[r * D + d]), BitsToFloat<T>(s_k[kk * D + d]), dot);
          }
          s = ScoreOf(dot, a);
        }
        s_p[i] = s;
      }
      __syncthreads();
      for (int r = warp; r < kGenRows; r += kWarps) {
        const float s = lane < kGenKeys ? s_p[r * kGenKeys + lane] : NegInf();
        const float mx = WarpMax(s);
        const float m_old = s_m[r];
        const float m_new = fmaxf(m_old, mx);
        const float m_use = m_new == NegInf() ? 0.0f : m_new;
        const float p = s == NegInf() ? 0.0f : __expf(s - m_use);
        const float sum = WarpSum(p);
        if (lane < kGenKeys) s_p[r * kGenKeys + lane] = p;
        if (lane == 0) {
          const float alpha = __expf(m_old - m_use);
          s_alpha[r] = alpha;
          s_l[r] = s_l[r] * alpha + sum;
          s_m[r] = m_new;
        }
      }
      __syncthreads();
      for (int i = tid; i < kGenRows * D; i += kThreads) {
        const int r = i / D;
        const int d = i - r * D;
        float o = s_o[i] * s_alpha[r];
        for (int kk = 0; kk < nk; ++kk) {
          o = fmaf(s_p[r * kGenKeys + kk], BitsToFloat<T>(s_v[kk * D + d]), o);
        }
        s_o[i] = o;
      }
    }
    __syncthreads();
    for (int i = tid; i < rows_here * D; i += kThreads) {
      const int r = i / D;
      const int d = i - r * D;
      const float l = s_l[r];
      a.out[static_cast<int64_t>(first + g0 + r) * out_stride + static_cast<int64_t>(h) * D + d] =
          FloatToBits<T>(l > 0.0f ? s_o[i] * __frcp_rn(l) : 0.0f);
    }
  }
}

// ----------------------------------------------------------------- host side

void CheckType(DType t) {
  if (t != DType::kBF16 && t != DType::kF16) {
    throw std::invalid_argument("paged attention: element type must be BF16 or F16, got " +
                                std::string(DTypeName(t)));
  }
}

void CheckShape(const PagedAttentionParams& p) {
  CheckType(p.t);
  if (p.n_heads <= 0 || p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0) {
    throw std::invalid_argument("paged attention: n_heads must be a positive multiple of n_kv_heads");
  }
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > kMaxHeadDim) {
    throw std::invalid_argument("paged attention: head_dim must be even and in [2, 256]");
  }
  if (p.block_size <= 0) throw std::invalid_argument("paged attention: block_size must be positive");
  if (p.window < 0 || !(p.softcap >= 0.0f)) {
    throw std::invalid_argument("paged attention: window and softcap must be >= 0");
  }
  if (p.max_blocks < 0 || p.q_stride < 0) {
    throw std::invalid_argument("paged attention: negative max_blocks or q_stride");
  }
  if (p.n_heads > 65535) throw std::invalid_argument("paged attention: too many heads");
  const auto a4 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 == 0; };
  if (!a4(p.k_cache) || !a4(p.v_cache)) {
    throw std::invalid_argument("paged attention: caches must be 4-byte aligned");
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

bool VecCaches(const PagedAttentionParams& p) {
  return p.head_dim % 8 == 0 && Aligned16(p.k_cache) && Aligned16(p.v_cache);
}

template <typename T, int VEC, int TS, int NC, int DFIX>
void LaunchSplitG(int gmax, dim3 grid, const DecodeArgs& a, cudaStream_t stream) {
  switch (gmax) {
    case 1:
      DecodeSplitKernel<T, VEC, TS, NC, DFIX, 1><<<grid, kThreads, 0, stream>>>(a);
      break;
    case 4:
      DecodeSplitKernel<T, VEC, TS, NC, DFIX, 4><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      DecodeSplitKernel<T, VEC, TS, NC, DFIX, 8><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  SPECLINE_CUDA_CHECK_LAUNCH();
}

template <typename T>
void LaunchDecode(const PagedAttentionParams& p, const DecodeArgs& a, int gmax, int count,
                  cudaStream_t stream) {
  const dim3 grid(count, a.n_kv_heads * a.chunks_per_kv, a.num_splits);
  if (VecCaches(p)) {
    if (p.head_dim == 64) {
      LaunchSplitG<T, 8, 8, 1, 64>(gmax, grid, a, stream);
    } else if (p.head_dim == 128) {
      LaunchSplitG<T, 8, 16, 1, 128>(gmax, grid, a, stream);
    } else {
      LaunchSplitG<T, 8, 32, 1, 0>(gmax, grid, a, stream);  // head_dim / 8 <= 32 chunks
    }
  } else {
    LaunchSplitG<T, 2, 32, kMaxHeadDim / 64, 0>(gmax, grid, a, stream);
  }
  if (a.num_splits > 1) {
    DecodeCombineKernel<T><<<dim3(count, a.n_heads), kCombineThreads, 0, stream>>>(a);
    SPECLINE_CUDA_CHECK_LAUNCH();
  }
}

// The wmma kernels need more than the default 48 KiB of shared memory: raise
// the limit once per device (cudaFuncSetAttribute is per device).
template <typename T, int D>
void EnsureWmmaSmem() {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  SPECLINE_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? (uint64_t{1} << dev) : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit)) return;
  SPECLINE_CUDA_CHECK(cudaFuncSetAttribute(PrefillWmmaKernel<T, D>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(WmmaLayout<D>::kBytes)));
  done.fetch_or(bit, std::memory_order_acq_rel);
}

template <typename T>
void LaunchPrefill(const PagedAttentionParams& p, const PrefillArgs& a, int n_tiles,
                   cudaStream_t stream) {
  const dim3 grid(n_tiles, p.n_heads);
  if (VecCaches(p) && p.head_dim == 64) {
    EnsureWmmaSmem<T, 64>();
    PrefillWmmaKernel<T, 64><<<grid, kThreads, WmmaLayout<64>::kBytes, stream>>>(a);
  } else if (VecCaches(p) && p.head_dim == 128) {
    EnsureWmmaSmem<T, 128>();
    PrefillWmmaKernel<T, 128><<<grid, kThreads, WmmaLayout<128>::kBytes, stream>>>(a);
  } else {
    PrefillGenericKernel<T><<<grid, kThreads, 0, stream>>>(a);
  }
  SPECLINE_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t DecodeWorkspaceBytes(int n, int n_heads, int head_dim, int max_len) {
  if (n <= 0 || n_heads <= 0 || head_dim <= 0 || max_len <= 0) return 0;
  const SplitPlan plan = DecodeSplits(n, n_heads, max_len);
  if (plan.num_splits <= 1) return 0;  // the split kernel writes the output itself
  return static_cast<size_t>(n) * n_heads * plan.num_splits * (head_dim + 2) * sizeof(float);
}

void PagedAttentionDecode(const PagedAttentionParams& p, const int32_t* rows, int n_rows,
                          void* workspace, cudaStream_t stream) {
  CheckType(p.t);
  const int count = rows != nullptr ? n_rows : p.n;
  if (count <= 0 || p.n <= 0) return;
  CheckShape(p);
  if (p.max_len <= 0) throw std::invalid_argument("paged attention decode: max_len must be positive");
  const SplitPlan plan = DecodeSplits(p.n, p.n_heads, p.max_len);
  if (plan.num_splits > 65535) throw std::invalid_argument("paged attention decode: max_len too large");
  if (plan.num_splits > 1 && workspace == nullptr) {
    throw std::invalid_argument("paged attention decode: workspace required (DecodeWorkspaceBytes)");
  }
  const int group = p.n_heads / p.n_kv_heads;
  const int gmax = group == 1 ? 1 : group <= 4 ? 4 : 8;
  DecodeArgs a{};
  FillPagedArgs(p, a);
  a.rows = rows;
  const size_t o_elems =
      static_cast<size_t>(p.n) * p.n_heads * plan.num_splits * static_cast<size_t>(p.head_dim);
  a.ws_o = static_cast<float*>(workspace);
  a.ws_ml = workspace != nullptr ? a.ws_o + o_elems : nullptr;
  a.chunks_per_kv = (group + gmax - 1) / gmax;
  a.split_len = plan.split_len;
  a.num_splits = plan.num_splits;
  a.max_len = p.max_len;
  if (static_cast<int64_t>(a.n_kv_heads) * a.chunks_per_kv > 65535) {
    throw std::invalid_argument("paged attention decode: too many heads");
  }
  if (p.t == DType::kBF16) {
    LaunchDecode<__nv_bfloat16>(p, a, gmax, count, stream);
  } else {
    LaunchDecode<__half>(p, a, gmax, count, stream);
  }
}

void PagedAttentionPrefill(const PagedAttentionParams& p, const int32_t* tile_first_row,
                           const int32_t* tile_rows, int n_tiles, cudaStream_t stream) {
  CheckType(p.t);
  if (n_tiles <= 0 || p.n <= 0) return;
  CheckShape(p);
  PrefillArgs a{};
  FillPagedArgs(p, a);
  a.tile_first_row = tile_first_row;
  a.tile_rows = tile_rows;
  a.q_vec = Aligned16(p.q) && p.q_stride % 8 == 0;
  if (p.t == DType::kBF16) {
    LaunchPrefill<__nv_bfloat16>(p, a, n_tiles, stream);
  } else {
    LaunchPrefill<__half>(p, a, n_tiles, stream);
  }
}

}  // namespace specline::cuda
