// Sampling kernels of the GPU backend (kernels/cuda/ops.h, "sampling"):
// argmax, repetition penalty, warping (temperature / top-k / top-p / min-p),
// inverse-CDF sampling and rejection-sampling verification.
//
// One block of kRowThreads threads per row; every pass over a row is a
// coalesced sweep (the row stays in L2 between passes). The CPU references
// are model/runtime/sampler.cc (Warp, TokenDistribution::InverseCdf) and
// model/drafters/verify.cc; the comments below say where and how the device
// matches them.
//
// WarpRows without a sort. Candidates are ordered by (logit desc, id asc),
// as in Warp. Top-k and top-p both keep the shortest prefix of that order
// whose cumulative weight reaches a target (weight 1 and target k; weight
// p and target top_p). SelectCut finds that prefix with a radix select on
// the order-preserving 32-bit key of the logit (digits of 11, 11 and 10
// bits, a histogram of weights in shared memory per digit): the boundary
// key K, the weight strictly above it, and how many of the tokens tied at
// K are needed; ties are then cut by id (the j-th tied token in vocabulary
// order), exactly as the CPU's comparator does. A prefix is represented as
// a Cut {key, max_id}: keep iff key > K or (key == K and id <= max_id).
// Top-p masses are fixed point (e * 2^bits, integer atomics), so the
// histograms, and with them the kept set, do not depend on the order of
// the atomic additions. exp is evaluated in fp32 (Warp uses double), which
// moves probabilities by a few ulps; decisions can differ from the CPU's
// only for inputs within that rounding of a top-p / min-p edge.
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace specline::cuda {
namespace {

constexpr int kRowThreads = 1024;
constexpr int kRowWarps = kRowThreads / 32;

// ------------------------------------------------------------ row sweeps

// Calls f(i, row[i]) for every i < n, each by one thread of the block;
// 16-byte loads when `vec4` (n % 4 == 0 and row 16-byte aligned). One block
// streams a whole row, so what bounds a sweep is the loads in flight per
// SM: each thread issues kUnroll independent loads before using them.
constexpr int kUnroll = 4;

template <typename F>
__device__ __forceinline__ void ForEachInRow(const float* __restrict__ row, int n, bool vec4,
                                             F&& f) {
  const int stride = blockDim.x;
  if (vec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int n4 = n / 4;
    int j = threadIdx.x;
    for (; j + (kUnroll - 1) * stride < n4; j += kUnroll * stride) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = row4[j + u * stride];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = 4 * (j + u * stride);
        f(i, v[u].x);
        f(i + 1, v[u].y);
        f(i + 2, v[u].z);
        f(i + 3, v[u].w);
      }
    }
    for (; j < n4; j += stride) {
      const float4 v = row4[j];
      f(4 * j, v.x);
      f(4 * j + 1, v.y);
      f(4 * j + 2, v.z);
      f(4 * j + 3, v.w);
    }
  } else {
    int i = threadIdx.x;
    for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = row[i + u * stride];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) f(i + u * stride, v[u]);
    }
    for (; i < n; i += stride) f(i, row[i]);
  }
}

bool RowsVec4(const float* base, int n) { return n % 4 == 0 && IsAligned(base, 16); }

// ----------------------------------------------------------------- argmax

struct ArgMax {
  float v;
  int32_t i;
};

// The larger value; the lower index among equal values (std::max_element).
__device__ __forceinline__ ArgMax Better(ArgMax a, ArgMax b) {
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ ArgMax BlockArgMax(ArgMax a) {
  __shared__ float vs[32];
  __shared__ int32_t is[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a = Better(a, ArgMax{__shfl_xor_sync(0xffffffffu, a.v, o),
                         __shfl_xor_sync(0xffffffffu, a.i, o)});
  }
  __syncthreads();
  if (lane == 0) {
    vs[warp] = a.v;
    is[warp] = a.i;
  }
  __syncthreads();
  a = lane < n_warps ? ArgMax{vs[lane], is[lane]} : ArgMax{-INFINITY, INT32_MAX};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a = Better(a, ArgMax{__shfl_xor_sync(0xffffffffu, a.v, o),
                         __shfl_xor_sync(0xffffffffu, a.i, o)});
  }
  if (a.i == INT32_MAX) a.i = 0;  // only NaNs: answer something in range
  return a;
}

__device__ ArgMax RowArgMax(const float* __restrict__ row, int n, bool vec4) {
  ArgMax best{-INFINITY, INT32_MAX};
  ForEachInRow(row, n, vec4, [&](int i, float v) { best = Better(best, ArgMax{v, i}); });
  return BlockArgMax(best);
}

__global__ void __launch_bounds__(kRowThreads)
    ArgmaxRowsKernel(const float* __restrict__ logits, int vocab, bool vec4,
                     int32_t* __restrict__ out) {
  const ArgMax best = RowArgMax(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, vec4);
  if (threadIdx.x == 0) out[blockIdx.x] = best.i;
}

// ------------------------------------------------------ repetition penalty

__global__ void RepetitionPenaltyKernel(float* __restrict__ logits,
                                        const int32_t* __restrict__ tokens, int count,
                                        float penalty) {
  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < count; k += gridDim.x * blockDim.x) {
    const int32_t id = tokens[k];
    if (id < 0) continue;
    const float l = logits[id];
    logits[id] = l > 0 ? l / penalty : l * penalty;
  }
}

// ------------------------------------------------------------ inverse CDF

// The first i < n (vocabulary order) with value(i) > 0 and
// u < value(0) + ... + value(i), the sums in double, as
// TokenDistribution::InverseCdf walks its (positive) probabilities. When u
// is past the total (rounding) the answer is the last i with value(i) > 0;
// 0 when there is none. Every thread of the block calls it and gets the
// answer. value(i) must be the same float each time it is called for i.
//
// Two sweeps: each warp sums a contiguous segment; the segment holding u
// is then scanned by the whole block, kItems contiguous values per thread.
constexpr int kCdfItems = 8;

template <typename Value>
__device__ int BlockInverseCdf(int n, double u, Value value) {
  __shared__ double seg_total[kRowWarps];
  __shared__ int seg_last[kRowWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  const int seg = (n + n_warps - 1) / n_warps;
  __syncthreads();  // a previous call may still be reading seg_*

  // Sweep 1: per-segment totals and last positive index.
  {
    const int begin = warp * seg, end = min(begin + seg, n);
    double sum = 0.0;
    int last = -1;
    int i = begin + lane;
    for (; i + 32 * (kUnroll - 1) < end; i += 32 * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) v[k] = value(i + 32 * k);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (v[k] > 0.0f) {
          sum += v[k];
          last = i + 32 * k;
        }
      }
    }
    for (; i < end; i += 32) {
      const float v = value(i);
      if (v > 0.0f) {
        sum += v;
        last = i;
      }
    }
    sum = WarpSumD(sum);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
    if (lane == 0) {
      seg_total[warp] = sum;
      seg_last[warp] = last;
    }
  }
  __syncthreads();

  // The segment holding u: the first w with before(w) + total(w) > u, where
  // before(w) is summed in the same order by every thread.
  int chosen = -1, last_any = -1;
  double before = 0.0, chosen_before = 0.0;
  for (int w = 0; w < n_warps; ++w) {
    if (seg_last[w] >= 0) last_any = seg_last[w];
    const double after = before + seg_total[w];
    if (chosen < 0 && u < after && seg_last[w] >= 0) {
      chosen = w;
      chosen_before = before;
    }
    before = after;
  }
  if (chosen < 0) return last_any >= 0 ? last_any : 0;  // uniform across the block

  // Sweep 2: block scan of the chosen segment, in chunks.
  const int begin = chosen * seg, end = min(begin + seg, n);
  double cdf_base = chosen_before;
  for (int chunk = begin; chunk < end; chunk += blockDim.x * kCdfItems) {
    const int first = chunk + threadIdx.x * kCdfItems;
    float v[kCdfItems];
    double local = 0.0;
#pragma unroll
    for (int k = 0; k < kCdfItems; ++k) {
      v[k] = first + k < end ? value(first + k) : 0.0f;
      if (v[k] > 0.0f) local += v[k];
    }
    double chunk_total;
    double cdf = cdf_base + BlockExclusiveSum(local, &chunk_total);
    int hit = INT_MAX;
#pragma unroll
    for (int k = 0; k < kCdfItems; ++k) {
      if (v[k] > 0.0f) {
        cdf += v[k];
        if (hit == INT_MAX && u < cdf) hit = first + k;
      }
    }
    hit = BlockReduce(hit, MinOp{}, INT_MAX);
    if (hit != INT_MAX) return hit;  // uniform across the block
    cdf_base += chunk_total;
  }
  // Rounding put u past this segment's scanned total: its last bin.
  return seg_last[chosen];
}

// ------------------------------------------------------------------- Warp

// Order-preserving key of a logit: a > b (as floats) iff Key(a) > Key(b);
// -0 and +0 map to the same key, as they compare equal.
__device__ __forceinline__ uint32_t Key(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// A prefix of the (logit desc, id asc) order.
struct Cut {
  uint32_t key;
  int32_t max_id;
};
constexpr Cut kKeepAll{0u, INT32_MAX};

__device__ __forceinline__ bool Keeps(Cut c, uint32_t key, int i) {
  return key > c.key || (key == c.key && i <= c.max_id);
}

constexpr int kHistBins = 2048;
struct SelectShared {
  // Per-digit weights as two 32-bit halves (64-bit shared atomics are CAS
  // loops; see AtomicAddSplit) and per-digit token counts.
  unsigned int lo[kHistBins];
  unsigned int hi[kHistBins];
  unsigned int count[kHistBins];
  int found;
  unsigned int digit;
  unsigned long long above;
};

// Adds w to the 64-bit value hi * 2^32 + lo with native 32-bit atomics,
// exactly: the thread whose addition wraps `lo` carries one into `hi`.
__device__ __forceinline__ void AtomicAddSplit(unsigned int* lo, unsigned int* hi,
                                               unsigned long long w) {
  const unsigned int wl = static_cast<unsigned int>(w);
  unsigned int wh = static_cast<unsigned int>(w >> 32);
  if (wl != 0) {
    const unsigned int old = atomicAdd(lo, wl);
    if (old + wl < old) ++wh;
  }
  if (wh != 0) atomicAdd(hi, wh);
}

// The shortest prefix of the (logit desc, id asc) order, among tokens with
// in_set(i, key), whose cumulative weight reaches the target; kKeepAll when
// the whole set does not reach it. kCount: weight 1 per token, target
// `count_target`. Otherwise weight(i, logit) (equal for equal logits) and
// target ceil(fraction * total weight of the set). Every thread of the
// block calls it.
template <bool kCount, typename InSet, typename Weight>
__device__ Cut SelectCut(const float* __restrict__ row, int vocab, bool vec4,
                         unsigned long long count_target, double fraction, InSet in_set,
                         Weight weight, SelectShared& s) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long above = 0, w_eq = 0, target = count_target;
  unsigned int c_eq = 0;
#pragma unroll 1
  for (int level = 0; level < 3; ++level) {
    const int shift = level == 0 ? 21 : level == 1 ? 10 : 0;
    const int bins = level == 2 ? 1024 : 2048;
    for (int b = threadIdx.x; b < bins; b += blockDim.x) {
      s.lo[b] = 0;
      s.hi[b] = 0;
      s.count[b] = 0;
    }
    if (threadIdx.x == 0) s.found = 0;
    __syncthreads();
    const bool need_count = kCount || level == 2;
    ForEachInRow(row, vocab, vec4, [&](int i, float v) {
      const uint32_t key = Key(v);
      if ((key & prefix_mask) != prefix || !in_set(i, key)) return;
      const unsigned d = (key >> shift) & (bins - 1);
      if constexpr (!kCount) AtomicAddSplit(&s.lo[d], &s.hi[d], weight(i, v));
      if (need_count) atomicAdd(&s.count[d], 1u);
    });
    __syncthreads();
    const auto bin_weight = [&](int b) -> unsigned long long {
      if constexpr (kCount) {
        return s.count[b];
      } else {
        return (static_cast<unsigned long long>(s.hi[b]) << 32) + s.lo[b];
      }
    };
    // Walk the bins from the highest digit down: thread t owns positions
    // 2t and 2t+1 of that descending order.
    const int p0 = 2 * threadIdx.x, p1 = p0 + 1;
    const unsigned long long w0 = p0 < bins ? bin_weight(bins - 1 - p0) : 0;
    const unsigned long long w1 = p1 < bins ? bin_weight(bins - 1 - p1) : 0;
    unsigned long long total;
    const unsigned long long start = above + BlockExclusiveSum(w0 + w1, &total);
    if (!kCount && level == 0) {
      target = static_cast<unsigned long long>(ceil(fraction * static_cast<double>(total)));
    }
    if (start < target && start + w0 + w1 >= target) {
      const bool first = start + w0 >= target;
      s.digit = bins - 1 - (first ? p0 : p1);
      s.above = first ? start : start + w0;
      s.found = 1;
    }
    __syncthreads();
    if (!s.found) return kKeepAll;  // uniform: the set's total is under target
    const unsigned digit = s.digit;
    above = s.above;
    w_eq = bin_weight(digit);
    c_eq = s.count[digit];
    prefix |= digit << shift;
    prefix_mask |= static_cast<uint32_t>(bins - 1) << shift;
    __syncthreads();  // everyone has read s before the next level clears it
  }
  // Every token with key == prefix has weight w_eq / c_eq (> 0: the bin
  // crossed the target); j of them are needed.
  const unsigned long long w_one = w_eq / c_eq;
  const unsigned long long j = (target - above + w_one - 1) / w_one;
  if (j >= c_eq) return Cut{prefix, INT32_MAX};
  // The j-th tied token in vocabulary order: inverse CDF of the 0/1 flags
  // at u = j - 0.5 (exact in double).
  const uint32_t k_cut = prefix;
  const int id = BlockInverseCdf(vocab, static_cast<double>(j) - 0.5, [&](int i) {
    const uint32_t key = Key(row[i]);
    return (key == k_cut && in_set(i, key)) ? 1.0f : 0.0f;
  });
  return Cut{k_cut, id};
}

// Fixed-point scale of the top-p masses: e <= 1 per token, so the total of
// round(e * 2^bits) stays under 2^63 for `vocab` tokens.
int MassBits(int vocab) {
  int log2v = 0;
  while ((int64_t{1} << log2v) < int64_t{vocab} + 1) ++log2v;
  return 63 - log2v;
}

__global__ void __launch_bounds__(kRowThreads)
    WarpRowsKernel(const float* __restrict__ logits, int vocab, bool vec4, float mass_scale,
                   const DeviceSamplingParams* __restrict__ params, float* __restrict__ probs) {
  __shared__ SelectShared s;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float* out = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  const DeviceSamplingParams P = params[blockIdx.x];

  const ArgMax best = RowArgMax(row, vocab, vec4);
  if (!(P.temperature > 0.0f)) {  // greedy: one-hot at the argmax
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) out[i] = i == best.i ? 1.0f : 0.0f;
    return;
  }
  // e = exp((z - max) / T) in fp32 (Warp uses double; the difference is a
  // few ulps of each probability), the same float at every evaluation.
  const float max_z = best.v;
  const float inv_t = 1.0f / P.temperature;
  const auto e_of = [&](float v) { return expf((v - max_z) * inv_t); };

  // Top-k: the k first of the order.
  Cut cut_k = kKeepAll;
  if (P.top_k > 0 && P.top_k < vocab) {
    cut_k = SelectCut<true>(
        row, vocab, vec4, static_cast<unsigned long long>(P.top_k), 0.0,
        [](int, uint32_t) { return true; }, [](int, float) { return 1ull; }, s);
  }
  const auto in_k = [&](int i, uint32_t key) { return Keeps(cut_k, key, i); };

  // Top-p over the top-k candidates: the shortest prefix whose mass
  // reaches top_p of theirs (masses in fixed point, e * 2^bits rounded).
  Cut cut_p = kKeepAll;
  if (P.top_p < 1.0f) {
    cut_p = SelectCut<false>(
        row, vocab, vec4, 0, static_cast<double>(P.top_p), in_k,
        [&](int, float v) { return __float2ull_rn(e_of(v) * mass_scale); }, s);
  }

  // Min-p: Warp drops p < min_p * max p, i.e. e < min_p (max e = 1).
  const float min_e = P.min_p > 0.0f ? P.min_p : 0.0f;
  const auto kept_e = [&](int i, float v, float* e) {
    const uint32_t key = Key(v);
    if (!Keeps(cut_k, key, i) || !Keeps(cut_p, key, i)) return false;
    *e = e_of(v);
    return *e >= min_e;
  };
  double kept = 0.0;
  ForEachInRow(row, vocab, vec4, [&](int i, float v) {
    float e;
    if (kept_e(i, v, &e)) kept += e;
  });
  const float inv_kept = static_cast<float>(1.0 / BlockSumD(kept));
  ForEachInRow(row, vocab, vec4, [&](int i, float v) {
    float e;
    out[i] = kept_e(i, v, &e) ? e * inv_kept : 0.0f;
  });
}

// ---------------------------------------------------------- sample/verify

__global__ void __launch_bounds__(kRowThreads)
    SampleFromProbsKernel(const float* __restrict__ probs, int vocab,
                          const float* __restrict__ uniforms, int32_t* __restrict__ out) {
  const float* p = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  const int tok = BlockInverseCdf(vocab, static_cast<double>(uniforms[blockIdx.x]),
                                  [&](int i) { return p[i]; });
  if (threadIdx.x == 0) out[blockIdx.x] = tok;
}

__global__ void __launch_bounds__(kRowThreads)
    VerifyDraftsKernel(const float* __restrict__ p_all, const float* __restrict__ q_all,
                       const int32_t* __restrict__ draft, const float* __restrict__ u_accept,
                       const float* __restrict__ u_residual, int vocab,
                       int32_t* __restrict__ out_token, int32_t* __restrict__ accepted) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * vocab;
  const float* p = p_all + off;
  const float* q = q_all != nullptr ? q_all + off : nullptr;
  const int32_t x = draft[blockIdx.x];
  // AcceptProbability: min(1, p(x) / q(x)) in double. (q(x) = 0 is invalid
  // input, which the CPU rejects; here it accepts iff p(x) > 0.)
  const double px = p[x];
  const double qx = q != nullptr ? static_cast<double>(q[x]) : 1.0;
  const double a = qx > 0.0 ? fmin(1.0, px / qx) : (px > 0.0 ? 1.0 : 0.0);
  if (static_cast<double>(u_accept[blockIdx.x]) < a) {  // uniform across the block
    if (threadIdx.x == 0) {
      out_token[blockIdx.x] = x;
      accepted[blockIdx.x] = 1;
    }
    return;
  }
  // ResidualDistribution: max(0, p - q) / Z; p itself when Z == 0. The
  // inverse CDF runs on the unnormalised residual at u * Z (no division
  // per token; the CPU normalises each entry to a float first, which moves
  // bin edges by float rounding only).
  const auto residual = [&](int i) {
    const float qi = q != nullptr ? q[i] : (i == x ? 1.0f : 0.0f);
    return fmaxf(p[i] - qi, 0.0f);
  };
  double z = 0.0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) z += residual(i);
  z = BlockSumD(z);
  const double u = u_residual[blockIdx.x];
  const int tok = z > 0.0 ? BlockInverseCdf(vocab, u * z, residual)
                          : BlockInverseCdf(vocab, u, [&](int i) { return p[i]; });
  if (threadIdx.x == 0) {
    out_token[blockIdx.x] = tok;
    accepted[blockIdx.x] = 0;
  }
}

}  // namespace

// ===================================================================== host

void ArgmaxRows(const float* logits, int n, int vocab, int32_t* out, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  ArgmaxRowsKernel<<<n, kRowThreads, 0, stream>>>(logits, vocab, RowsVec4(logits, vocab), out);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

void ApplyRepetitionPenalty(float* logits, const int32_t* tokens, int count, float penalty,
                            cudaStream_t stream) {
  if (count <= 0 || penalty == 1.0f) return;
  const int threads = 256;
  const int blocks = std::min((count + threads - 1) / threads, 1024);
  RepetitionPenaltyKernel<<<blocks, threads, 0, stream>>>(logits, tokens, count, penalty);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

// All per-row state lives in shared memory: no device scratch is needed.
size_t WarpWorkspaceBytes(int /*n*/, int /*vocab*/) { return 0; }

void WarpRows(const float* logits, int n, int vocab, const DeviceSamplingParams* params,
              float* probs, void* /*workspace*/, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  const float mass_scale = std::ldexp(1.0f, MassBits(vocab));
  WarpRowsKernel<<<n, kRowThreads, 0, stream>>>(logits, vocab, RowsVec4(logits, vocab),
                                                mass_scale, params, probs);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

void SampleFromProbs(const float* probs, int n, int vocab, const float* uniforms, int32_t* out,
                     cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  SampleFromProbsKernel<<<n, kRowThreads, 0, stream>>>(probs, vocab, uniforms, out);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

void VerifyDrafts(const float* p, const float* q, const int32_t* draft, const float* u_accept,
                  const float* u_residual, int n, int vocab, int32_t* out_token,
                  int32_t* accepted, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  VerifyDraftsKernel<<<n, kRowThreads, 0, stream>>>(p, q, draft, u_accept, u_residual, vocab,
                                                    out_token, accepted);
  SPECLINE_CUDA_CHECK_LAUNCH();
}

}  // namespace specline::cuda
