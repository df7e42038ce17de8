// CUDA kernels of the GPU backend, as plain host functions that enqueue work
// on a stream (nothing here synchronizes; every launch is checked with
// SPECLINE_CUDA_CHECK_LAUNCH, so a bad configuration throws CudaError).
//
// Conventions shared by every kernel:
// - `t` is the activation / weight element type: DType::kBF16 or DType::kF16
//   (anything else throws std::invalid_argument). Arithmetic is fp32.
// - The residual stream `x` stays fp32 on the device ([n, dim] row-major);
//   what feeds a GEMM (normed rows, q/k/v, attention output, MLP
//   intermediate) is in `t`.
// - Row-major everywhere; "row stride" is in elements of the row's type.
// - Every function accepts n == 0 (and then launches nothing).
// - Kernels never read memory they were not given: no implicit padding.
//
// Implementations: elementwise.cu (norms, RoPE, SwiGLU, embedding, KV
// writes, conversions, random fill), attention.cu (paged attention),
// sampling.cu (argmax, warping, sampling, verification). GEMMs are in
// gemm.h (cuBLAS plus a small-batch GEMV).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace specline::cuda {

// ---------------------------------------------------------------- elementwise

// x[i, :] = fp32(table[tokens[i], :]); table is [vocab, dim] of `t`.
// Token ids are trusted (the host validated them).
void EmbedTokens(DType t, const void* table, const int32_t* tokens, int n, int dim, float* x,
                 cudaStream_t stream);

// Fused residual add and RMSNorm, one row per block:
//   if delta != nullptr: x[i, :] += fp32(delta[i, :])   (delta is [n, dim] of t)
//   out[i, :] = t(x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight[:])
// `weight` is fp32 [dim]. x is updated in place (it is the residual stream).
void AddRmsNorm(DType t, float* x, const void* delta, const float* weight, float eps, int n,
                int dim, void* out, cudaStream_t stream);

// x[i] += fp32(delta[i]) for i < count (delta of t): the last residual add
// of a slice, which no following norm fuses.
void AddResidual(DType t, float* x, const void* delta, int64_t count, cudaStream_t stream);

// rows[r, :width] += bias[:width] (bias fp32), rows of t with row stride
// `stride`: Qwen2's q/k/v bias on the fused qkv output.
void AddBias(DType t, void* rows, const float* bias, int n_rows, int width, int stride,
             cudaStream_t stream);

// In place, per head: v = v / rms(v) * weight (weight fp32 [head_dim]).
// Heads of row r start at rows + r * stride, `heads` of them back to back:
// Qwen3's q/k norm on the fused qkv output.
void HeadRmsNorm(DType t, void* rows, const float* weight, float eps, int n_rows, int heads,
                 int head_dim, int stride, cudaStream_t stream);

// In place rotary embedding of `heads` consecutive heads starting at
// rows + r * stride, with row r's angles cos[r, :head_dim/2], sin[...]
// (computed on the host by Rope::Angles, so Llama 3 scaling is the CPU's).
// interleaved: pairs (2i, 2i+1); otherwise pairs (i, i + head_dim/2).
// Same formula as Rope::Apply: a' = a cos - b sin, b' = a sin + b cos.
// rot_dim (0: head_dim): partial rotary, only the first rot_dim dims of each
// head rotate (pairs (i, i + rot_dim/2) or (2i, 2i+1) among them); cos/sin
// rows stay head_dim/2 wide.
void ApplyRope(DType t, void* rows, int n_rows, int heads, int head_dim, int stride,
               const float* cos, const float* sin, bool interleaved, cudaStream_t stream,
               int rot_dim = 0);

// out[i, :h] = t(silu(gate) * up) with gate = gate_up[i, :h] and
// up = gate_up[i, h:2h] (the fused gate/up projection's output).
void SwiGlu(DType t, const void* gate_up, int n, int h, void* out, cudaStream_t stream);
// The same with gelu_tanh(gate) (Gemma's GeGLU).
void GeGlu(DType t, const void* gate_up, int n, int h, void* out, cudaStream_t stream);
// x[i] *= s over fp32 (Gemma's sqrt(dim) embedding scale on the residual stream).
void ScaleF32(float* x, int64_t count, float s, cudaStream_t stream);
// x[i] = cap * tanh(x[i] / cap) over fp32 (Gemma 2's final-logit soft cap);
// nothing when cap <= 0.
void SoftCapF32(float* x, int64_t count, float cap, cudaStream_t stream);

// Copies each slot's K and V rows into the paged cache of one layer:
//   k_cache[slot_rows[i], :kv_elems] = qkv[i * stride + k_offset + :kv_elems]
//   v_cache[slot_rows[i], :kv_elems] = qkv[i * stride + v_offset + :kv_elems]
// where a cache "row" is one position of one block: physical row =
// block * block_size + pos % block_size, kv_elems = n_kv_heads * head_dim.
void WriteKv(DType t, const void* qkv, int n, int stride, int k_offset, int v_offset,
             int kv_elems, const int32_t* slot_rows, void* k_cache, void* v_cache,
             cudaStream_t stream);

// Element type conversions (count elements).
void ToFloat(DType t, const void* in, int64_t count, float* out, cudaStream_t stream);
void FromFloat(DType t, const float* in, int64_t count, void* out, cudaStream_t stream);

// Fills `count` elements of t with uniform values in [-scale, scale) derived
// from (seed, index) by splitmix64 (model/splitmix64.h's mixer), so a fill
// is reproducible: for random benchmark models of billions of weights,
// made on the device instead of read from a file.
void FillUniform(DType t, void* out, int64_t count, uint64_t seed, float scale,
                 cudaStream_t stream);
void FillUniformF32(float* out, int64_t count, uint64_t seed, float lo, float hi,
                    cudaStream_t stream);

// ------------------------------------------------------------------ attention

// Paged attention over one layer's cache. The cache of a layer is
// [num_blocks][block_size][n_kv_heads][head_dim] of t for K and for V.
// Query row i (head h) attends to the keys at positions [0, row_len[i]) of
// its sequence, whose blocks are block_tables[row_seq[i] * max_blocks + j]
// (position p lives in block p / block_size, at p % block_size). GQA: query
// head h reads KV head h / (n_heads / n_kv_heads). Softmax in fp32, scaled
// by `scale`; out is [n, n_heads * head_dim] of t.
struct PagedAttentionParams {
  DType t = DType::kBF16;
  const void* q = nullptr;  // row i, head h at q + i * q_stride + h * head_dim
  int q_stride = 0;
  void* out = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr;  // [n_seqs][max_blocks]
  int max_blocks = 0;
  const int32_t* row_seq = nullptr;  // [n]
  const int32_t* row_len = nullptr;  // [n], each in [1, max_len]
  int n = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // any even value up to 256; 64 and 128 are the fast paths
  int block_size = 0;
  float scale = 1.0f;
  // An upper bound on every row_len, fixed for a given cache: the decode
  // kernel's grid (its split-K factor) depends only on it, so a CUDA graph
  // captured once replays correctly as sequences grow. Work past a row's
  // own length exits at once.
  int max_len = 0;
  // Sliding window: row i sees keys [row_len - window, row_len); 0 = all.
  int window = 0;
  // Soft cap of the scaled scores, softcap * tanh(s / softcap); 0 = none.
  float softcap = 0.0f;
};

// Decode: split-K over the sequence (flash-decoding): each (row, head,
// split) block reduces its key range with an online softmax into fp32
// partials in `workspace`, and a second kernel combines the splits. Runs
// the rows listed in rows[0, n_rows) (device array), or all n rows when
// rows is nullptr.
size_t DecodeWorkspaceBytes(int n, int n_heads, int head_dim, int max_len);
void PagedAttentionDecode(const PagedAttentionParams& p, const int32_t* rows, int n_rows,
                          void* workspace, cudaStream_t stream);

// Prefill: tiled flash attention with an online softmax. Tile j covers the
// query rows [tile_first_row[j], tile_first_row[j] + tile_rows[j]) (device
// arrays, tile_rows[j] <= kPrefillTileRows): consecutive positions of one
// sequence, so one K/V tile read from the cache serves every query of the
// tile; the causal limit is still each row's own row_len.
inline constexpr int kPrefillTileRows = 64;
void PagedAttentionPrefill(const PagedAttentionParams& p, const int32_t* tile_first_row,
                           const int32_t* tile_rows, int n_tiles, cudaStream_t stream);

// ------------------------------------------------------------------- sampling

// out[i] = argmax_j logits[i, j]; the lowest index among ties (the CPU
// sampler's rule). logits fp32 [n, vocab].
void ArgmaxRows(const float* logits, int n, int vocab, int32_t* out, cudaStream_t stream);

// Per-row sampling parameters on the device (SamplingParams minus the
// host-only fields: the repetition penalty is applied to the logits first
// with ApplyRepetitionPenalty, and seeds stay on the host, which draws the
// uniforms).
struct DeviceSamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (one-hot argmax)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
};

// In place on one row: logits of tokens[0, count) (unique ids) are divided
// by `penalty` when positive and multiplied when negative.
void ApplyRepetitionPenalty(float* logits, const int32_t* tokens, int count, float penalty,
                            cudaStream_t stream);

// probs[i, :] = the distribution Warp() (model/runtime/sampler.h) gives for
// logits[i, :] under params[i]: temperature, top-k, top-p, min-p, then
// renormalised, with zeros for dropped tokens. Same keep rules as the CPU,
// including ties. `workspace` holds WarpWorkspaceBytes(n, vocab).
size_t WarpWorkspaceBytes(int n, int vocab);
void WarpRows(const float* logits, int n, int vocab, const DeviceSamplingParams* params,
              float* probs, void* workspace, cudaStream_t stream);

// out[i] = the token whose vocabulary-order CDF bin of probs[i, :] holds
// uniforms[i] in [0, 1) (TokenDistribution::InverseCdf), so with the same
// uniform the device draws what the CPU draws (up to float rounding at a
// bin edge).
void SampleFromProbs(const float* probs, int n, int vocab, const float* uniforms, int32_t* out,
                     cudaStream_t stream);

// Rejection-sampling verification (model/drafters/verify.h) of n drafts at
// once. p: target probs [n, vocab]; q: draft probs [n, vocab], or nullptr for
// point-mass drafts (q = one-hot(draft)). Row i accepts draft[i] when
// u_accept[i] < min(1, p/q); otherwise out_token[i] is drawn from the
// normalised residual max(0, p - q) with u_residual[i] (vocabulary-order
// inverse CDF; p itself when the residual is all zero). accepted[i] is 1 or
// 0; out_token[i] is the draft when accepted.
void VerifyDrafts(const float* p, const float* q, const int32_t* draft, const float* u_accept,
                  const float* u_residual, int n, int vocab, int32_t* out_token,
                  int32_t* accepted, cudaStream_t stream);

}  // namespace specline::cuda
