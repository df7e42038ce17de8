// Causal attention over a paged KV cache, flash-attention style, on the CPU.
//
// Every query row attends to the positions [0, pos] of its sequence, whose
// K/V rows live in fixed-size blocks named by a block table (the layout of
// model/runtime/kv_cache.h, but nothing here depends on that class). The
// kernel never materializes a row of scores: keys are visited in chunks of
// kAttentionChunk positions with an online softmax (running max, running
// sum, rescaled accumulator), all query heads of one KV head's group and up
// to 16 consecutive rows of the same sequence (a tile) are processed against
// each chunk while it is in L1, and chunks past a row's causal limit are
// skipped.
//
// Determinism (the invariant speculative verification relies on): the bits of
// one row's output depend only on that row's query, position, block table
// contents and the shape, never on which other rows share the call, on the
// thread count, or on how the work was split. Chunks and segments are
// aligned to absolute positions; within a segment of kAttentionSegment
// positions the chunks are folded in increasing order, and the segments'
// partial results are merged in increasing order, whether one task walks all
// of them or they run as separate tasks (split-K, used when there are too
// few rows to keep the threads busy, e.g. decode). Rows sharing a tile only
// share loads. docs/kernels.md ("Attention") has the details.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/thread_pool.h"

namespace specline::kernels {

// Positions folded per online-softmax step; chunks start at multiples of it.
inline constexpr int kAttentionChunk = 16;
// Positions per independently reduced segment (a multiple of the chunk);
// segments start at multiples of it and are merged in order.
inline constexpr int kAttentionSegment = 256;

// One layer's K and V in a paged cache. The K row of position t of a
// sequence with block table `table` is
//   k + table[t / block_size] * block_stride + (t % block_size) * pos_stride
// and KV head h's head_dim values start h * head_dim further (V likewise).
struct PagedKvView {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t block_stride = 0;  // elements between blocks
  int64_t pos_stride = 0;    // elements between positions of a block
  int block_size = 0;
};

struct AttentionRow {
  // The row's sequence: its blocks must cover [0, pos]. Consecutive rows with
  // the same table pointer are tiled together.
  const int32_t* block_table = nullptr;
  int32_t pos = 0;  // attends to positions [0, pos] (causal)
};

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;  // divides n_heads (grouped-query attention)
  int head_dim = 0;
  float scale = 1.0f;  // multiplies q.k
  // Sliding window (Gemma's local layers): a row at pos attends to
  // [max(0, pos - window + 1), pos]; 0 means the whole causal prefix.
  int window = 0;
  // Soft-capping of the scaled scores, cap * tanh(score / cap) (Gemma 2);
  // 0 means none.
  float softcap = 0.0f;
};

// How the work is split; every plan gives the same bits (tested).
enum class AttentionPlan {
  kAuto,      // split-K when the (tile, KV head) tasks are too few for the pool
  kPerTile,   // one task per (tile, KV head) walks all of its segments
  kSplitK,    // one task per (tile, KV head, segment), merged afterwards
};

// out[r][h][:] = softmax_t(scale * q[r][h].K[t]) . V[t] over t in [0, pos_r]
// (t in the window when shape.window > 0; scores soft-capped when
// shape.softcap > 0)
// with K/V of KV head h / (n_heads / n_kv_heads). q and out are dense
// [rows][n_heads][head_dim] fp32 and must not overlap.
void PagedAttention(const AttentionShape& shape, const PagedKvView& kv,
                    std::span<const AttentionRow> rows, const float* q, float* out,
                    ThreadPool& pool, AttentionPlan plan = AttentionPlan::kAuto);

// The exp used by the kernel (a Cephes-style polynomial on the 8-lane Vec,
// within ~2 ulp of expf for x in [-87, 88]; below that it returns ~0; the
// same bits on the AVX2 and portable paths). Exposed for tests.
float AttentionExp(float x);

}  // namespace specline::kernels
