// Flash-attention style causal attention over a paged KV cache (attention.h).
//
// Per (row, query head) the arithmetic is fixed by the row alone:
//  * keys are taken in chunks [c, c + 16) with c a multiple of 16, up to the
//    row's position; a chunk's scores are q.k in the canonical Dot order of
//    simd.h (so each equals kernels::Dot(q, k) bit for bit) times `scale`;
//  * within a segment [s, s + 256) the chunks are folded in increasing order
//    into (m, l, o): m = running max, l = running sum of exp(score - m),
//    o = running sum of exp(score - m) * v, rescaled by exp(m_old - m_new);
//  * the segments' (m, l, o) are merged in increasing order into (M, L, O),
//    and out = O * (1 / L).
// A tile (up to kTileRows consecutive rows of one sequence, all heads of one
// KV head's group) walks the chunks once and applies each to every row-head
// whose causal limit reaches it: the K/V chunk is fetched from memory once per
// tile and then read from L1. Whether one task walks a tile's segments in
// order (kPerTile: tasks are (tile, KV head)) or each segment is its own task
// and the merge runs after (kSplitK: tasks are (tile, segment), all KV heads
// or one, for decode and short verification batches), the same operations
// happen on the same values.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/simd.h"

namespace specline::kernels {
namespace {

using detail::kLanes;
using detail::Reduce;
using detail::VAdd;
using detail::Vec;
using detail::VFma;
using detail::VLoad;
using detail::VLoadPartial;
using detail::VMul;
using detail::VSet1;
using detail::VStore;
using detail::VStorePartial;
using detail::VZero;

constexpr int kChunk = kAttentionChunk;
constexpr int kSegment = kAttentionSegment;
static_assert(kChunk % kLanes == 0, "a chunk is whole vectors of scores");
static_assert(kSegment % kChunk == 0, "segments hold whole chunks");
// Rows per tile: 16 rows x 3 heads of state (~13 KB at head_dim 64) plus a
// K/V chunk (8 KB) stay in L1.
constexpr int kTileRows = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------
// Vector operations beyond simd.h's, with identical AVX2 and portable
// semantics (max/min as (a > b) ? a : b, as the x86 instructions define them).

#if SPECLINE_KERNELS_AVX2

inline Vec VSub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec VMax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec VMin(Vec a, Vec b) { return _mm256_min_ps(a, b); }
inline Vec VFloor(Vec a) { return _mm256_floor_ps(a); }
// 2^n for lanes holding integers n in [-126, 127].
inline Vec VPow2(Vec n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
// Lanes [0, n) from a, the rest from b.
inline Vec VSelectFirst(int n, Vec a, Vec b) {
  return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(detail::LaneMask(n)));
}
inline float First(Vec v) { return _mm256_cvtss_f32(v); }
inline float HMax(Vec v) {
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
}
// Lane j = Reduce(x[j]), by the same tree: lo + hi halves, then elements i
// and i + 2, then 0 and 1, done for eight vectors at once.
inline Vec Reduce8(const Vec* x) {
  Vec s[4];
  for (int j = 0; j < 4; ++j) {
    s[j] = _mm256_add_ps(_mm256_permute2f128_ps(x[j], x[j + 4], 0x20),
                         _mm256_permute2f128_ps(x[j], x[j + 4], 0x31));
  }
  const Vec t01 = _mm256_add_ps(_mm256_unpacklo_ps(s[0], s[1]), _mm256_unpackhi_ps(s[0], s[1]));
  const Vec t23 = _mm256_add_ps(_mm256_unpacklo_ps(s[2], s[3]), _mm256_unpackhi_ps(s[2], s[3]));
  return _mm256_add_ps(_mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 2, 3, 2)));
}

#else  // portable

inline float Max1(float a, float b) { return a > b ? a : b; }
inline float Min1(float a, float b) { return a < b ? a : b; }
inline Vec VSub(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] -= b.v[i];
  return a;
}
inline Vec VMax(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] = Max1(a.v[i], b.v[i]);
  return a;
}
inline Vec VMin(Vec a, Vec b) {
  for (int i = 0; i < kLanes; ++i) a.v[i] = Min1(a.v[i], b.v[i]);
  return a;
}
inline Vec VFloor(Vec a) {
  for (int i = 0; i < kLanes; ++i) a.v[i] = std::floor(a.v[i]);
  return a;
}
inline Vec VPow2(Vec n) {
  Vec r;
  for (int i = 0; i < kLanes; ++i) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n.v[i]) + 127) << 23;
    std::memcpy(&r.v[i], &bits, sizeof bits);
  }
  return r;
}
inline Vec VSelectFirst(int n, Vec a, Vec b) {
  for (int i = 0; i < n && i < kLanes; ++i) b.v[i] = a.v[i];
  return b;
}
inline float First(Vec v) { return v.v[0]; }
inline float HMax(Vec v) {
  float m4[4], m2[2];
  for (int i = 0; i < 4; ++i) m4[i] = Max1(v.v[i], v.v[i + 4]);
  for (int i = 0; i < 2; ++i) m2[i] = Max1(m4[i], m4[i + 2]);
  return Max1(m2[0], m2[1]);
}
inline Vec Reduce8(const Vec* x) {
  Vec r;
  for (int j = 0; j < kLanes; ++j) r.v[j] = Reduce(x[j]);
  return r;
}

#endif

// exp(x), Cephes' expf polynomial with fused multiply-adds: x = n ln2 + r,
// |r| <= ln2 / 2, exp(r) by a degree-7 polynomial, times 2^n built in the
// exponent bits. x is clamped to [-87, 88] (exp(-87) ~ 1.6e-38: negligible
// next to the chunk maximum's exp(0) = 1). exp(0) is exactly 1.
inline Vec VExp(Vec x) {
  x = VMin(VMax(x, VSet1(-87.0f)), VSet1(88.0f));
  const Vec n = VFloor(VFma(x, VSet1(1.44269504088896341f), VSet1(0.5f)));
  Vec r = VFma(n, VSet1(-0.693359375f), x);
  r = VFma(n, VSet1(2.12194440e-4f), r);
  Vec y = VSet1(1.9875691500e-4f);
  y = VFma(y, r, VSet1(1.3981999507e-3f));
  y = VFma(y, r, VSet1(8.3334519073e-3f));
  y = VFma(y, r, VSet1(4.1665795894e-2f));
  y = VFma(y, r, VSet1(1.6666665459e-1f));
  y = VFma(y, r, VSet1(5.0000001201e-1f));
  y = VFma(y, VMul(r, r), r);
  y = VAdd(y, VSet1(1.0f));
  return VMul(y, VPow2(n));
}

inline float ExpScalar(float x) { return First(VExp(VSet1(x))); }

// ---------------------------------------------------------------------------
// The per-row-head steps.

// Scores q.k[j] for the eight key rows k[0..7], each in Dot's order.
inline Vec Scores8(const float* q, const float* const* k, int hd) {
  Vec acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = VZero();
  int i = 0;
  for (; i + kLanes <= hd; i += kLanes) {
    const Vec qv = VLoad(q + i);
    for (int j = 0; j < kLanes; ++j) acc[j] = VFma(qv, VLoad(k[j] + i), acc[j]);
  }
  if (i < hd) {
    const int rest = hd - i;
    const Vec qv = VLoadPartial(q + i, rest);
    for (int j = 0; j < kLanes; ++j) acc[j] = VFma(qv, VLoadPartial(k[j] + i, rest), acc[j]);
  }
  return Reduce8(acc);
}

// o[0, NV * 8) = o * alpha (or 0 when first) + sum_t p[t] * v[t][...] in
// increasing t; NV independent accumulation chains per step.
template <int NV>
inline void AccumulateBlock(float* o, const float* p, const float* const* v, int n, int off,
                            bool first, float alpha) {
  Vec acc[NV];
  if (first) {
    for (int j = 0; j < NV; ++j) acc[j] = VZero();
  } else if (alpha == 1.0f) {  // o * 1 == o
    for (int j = 0; j < NV; ++j) acc[j] = VLoad(o + off + j * kLanes);
  } else {
    const Vec a = VSet1(alpha);
    for (int j = 0; j < NV; ++j) acc[j] = VMul(VLoad(o + off + j * kLanes), a);
  }
  for (int t = 0; t < n; ++t) {
    const Vec pt = VSet1(p[t]);
    const float* vt = v[t] + off;
    for (int j = 0; j < NV; ++j) acc[j] = VFma(pt, VLoad(vt + j * kLanes), acc[j]);
  }
  for (int j = 0; j < NV; ++j) VStore(o + off + j * kLanes, acc[j]);
}

inline void Accumulate(float* o, const float* p, const float* const* v, int n, int hd, bool first,
                       float alpha) {
  int off = 0;
  for (; off + 8 * kLanes <= hd; off += 8 * kLanes) AccumulateBlock<8>(o, p, v, n, off, first, alpha);
  if (off + 4 * kLanes <= hd) {
    AccumulateBlock<4>(o, p, v, n, off, first, alpha);
    off += 4 * kLanes;
  }
  for (; off + kLanes <= hd; off += kLanes) AccumulateBlock<1>(o, p, v, n, off, first, alpha);
  if (off < hd) {  // partial vector: same per-element operations
    const int rest = hd - off;
    Vec acc = first ? VZero() : VMul(VLoadPartial(o + off, rest), VSet1(alpha));
    for (int t = 0; t < n; ++t) acc = VFma(VSet1(p[t]), VLoadPartial(v[t] + off, rest), acc);
    VStorePartial(o + off, acc, rest);
  }
}

// Folds keys [0, n_valid) of a chunk (rows k[], v[]) into the state (m, l, o)
// of one row-head; `first` when the state is empty (start of a segment).
// Keys [0, n_skip) are outside the row's sliding window: masked like the
// keys past n_valid (score -inf, weight exactly 0, so 0 * v adds nothing).
// softcap > 0 caps the scaled scores with libm's tanh (the same bits on both
// paths, whatever the thread).
void FoldChunk(const float* q, const float* const* k, const float* const* v, int n_valid, int hd,
               float scale, float softcap, int n_skip, bool first, float& m, float& l, float* o) {
  constexpr int kGroups = kChunk / kLanes;
  const int groups = (n_valid + kLanes - 1) / kLanes;
  const Vec vscale = VSet1(scale);
  const Vec neg_inf = VSet1(kNegInf);
  Vec s[kGroups];
  for (int g = 0; g < groups; ++g) {
    s[g] = VMul(Scores8(q, k + g * kLanes, hd), vscale);
  }
  if (softcap > 0.0f) {
    alignas(32) float raw[kChunk];
    const float inv = 1.0f / softcap;
    for (int g = 0; g < groups; ++g) VStore(raw + g * kLanes, s[g]);
    for (int j = 0; j < groups * kLanes; ++j) raw[j] = softcap * std::tanh(raw[j] * inv);
    for (int g = 0; g < groups; ++g) s[g] = VLoad(raw + g * kLanes);
  }
  const int last = n_valid - (groups - 1) * kLanes;  // valid lanes of the last group
  s[groups - 1] = VSelectFirst(last, s[groups - 1], neg_inf);
  // Leading lanes masked by the window: group g loses its first skip_in(g).
  auto skip_in = [n_skip](int g) { return std::clamp(n_skip - g * kLanes, 0, kLanes); };
  for (int g = 0; g < groups && skip_in(g) > 0; ++g) {
    s[g] = VSelectFirst(skip_in(g), neg_inf, s[g]);
  }
  Vec vmax = s[0];
  for (int g = 1; g < groups; ++g) vmax = VMax(vmax, s[g]);
  const float cmax = HMax(vmax);
  const float m_new = first ? cmax : (m > cmax ? m : cmax);
  const Vec vm = VSet1(m_new);
  alignas(32) float p[kChunk];
  Vec psum = VZero();
  for (int g = 0; g < groups; ++g) {
    Vec pg = VExp(VSub(s[g], vm));
    if (g == groups - 1) pg = VSelectFirst(last, pg, VZero());
    if (skip_in(g) > 0) pg = VSelectFirst(skip_in(g), VZero(), pg);
    VStore(p + g * kLanes, pg);
    psum = g == 0 ? pg : VAdd(psum, pg);
  }
  // alpha = exp(m - m_new) is exactly 1 when the maximum did not move, and
  // then rescaling changes nothing: skipping it gives the same bits.
  float alpha = 1.0f;
  if (first) {
    l = Reduce(psum);
  } else {
    if (m_new != m) alpha = ExpScalar(m - m_new);
    l = std::fma(l, alpha, Reduce(psum));
  }
  m = m_new;
  Accumulate(o, p, v, n_valid, hd, first, alpha);
}

// (M, L, O) <- merge of itself with a segment's (m, l, o); a copy when first.
void MergeInto(float& M, float& L, float* O, float m, float l, const float* o, int hd, bool first) {
  if (first) {
    M = m;
    L = l;
    std::memcpy(O, o, sizeof(float) * hd);
    return;
  }
  const float mn = M > m ? M : m;
  const float a = ExpScalar(M - mn);
  const float b = ExpScalar(m - mn);
  L = std::fma(L, a, l * b);
  M = mn;
  const Vec va = VSet1(a), vb = VSet1(b);
  int i = 0;
  for (; i + kLanes <= hd; i += kLanes) {
    VStore(O + i, VFma(VLoad(o + i), vb, VMul(VLoad(O + i), va)));
  }
  if (i < hd) {
    const int rest = hd - i;
    VStorePartial(O + i, VFma(VLoadPartial(o + i, rest), vb, VMul(VLoadPartial(O + i, rest), va)),
                  rest);
  }
}

void Finalize(const float* O, float L, float* out, int hd) {
  const Vec inv = VSet1(1.0f / L);
  int i = 0;
  for (; i + kLanes <= hd; i += kLanes) VStore(out + i, VMul(VLoad(O + i), inv));
  if (i < hd) VStorePartial(out + i, VMul(VLoadPartial(O + i, hd - i), inv), hd - i);
}

// ---------------------------------------------------------------------------
// Tiles and tasks.

struct Tile {
  int32_t row_begin = 0, row_end = 0;
  const int32_t* table = nullptr;
  int32_t limit = 0;  // 1 + the largest position of its rows
  int32_t low = 0;    // the smallest window start of its rows (0 without a window)
  int first_segment() const { return low / kSegment; }
  int end_segment() const { return (limit - 1) / kSegment + 1; }
  int segments() const { return end_segment() - first_segment(); }
};

// The first position a row at `pos` attends to.
inline int32_t WindowStart(const AttentionShape& shape, int32_t pos) {
  return shape.window > 0 ? std::max<int32_t>(0, pos - shape.window + 1) : 0;
}

// Whether segment s holds any key of the row at pos.
inline bool RowInSegment(const AttentionShape& shape, int32_t pos, int s) {
  return pos >= s * kSegment && WindowStart(shape, pos) < (s + 1) * kSegment;
}

struct Ctx {
  AttentionShape shape;
  PagedKvView kv;
  const AttentionRow* rows;
  const float* q;
  float* out;
  int group;        // query heads per KV head
  int64_t stride;   // floats per row of q / out: n_heads * head_dim
};

// Segment state of every row-head of a tile: m, l and o (head_dim).
struct SegmentState {
  std::vector<float> m, l, o;
  void Resize(int row_heads, int hd) {
    m.resize(row_heads);
    l.resize(row_heads);
    o.resize(static_cast<size_t>(row_heads) * hd);
  }
};

// K/V row pointers of positions [c0, c0 + n) of KV head `kvh` into k[], v[]
// (kChunk entries; the ones past n repeat position c0's, never read as data).
void ChunkRows(const Ctx& c, const int32_t* table, int32_t c0, int n, int kvh, const float** k,
               const float** v) {
  const int bs = c.kv.block_size;
  const int64_t head_off = int64_t{kvh} * c.shape.head_dim;
  int32_t block = c0 / bs, off = c0 % bs;
  for (int j = 0; j < n; ++j) {
    const int64_t at = table[block] * c.kv.block_stride + off * c.kv.pos_stride + head_off;
    k[j] = c.kv.k + at;
    v[j] = c.kv.v + at;
    if (++off == bs) {
      off = 0;
      ++block;
    }
  }
  for (int j = n; j < kChunk; ++j) {
    k[j] = k[0];
    v[j] = v[0];
  }
}

// The KV heads [kvh_begin, kvh_end) of a tile: a task's share of it. Its
// row-heads are indexed (row - row_begin) * heads() + (h - first_head()).
struct HeadRange {
  int kvh_begin, kvh_end;
  int group;
  int heads() const { return (kvh_end - kvh_begin) * group; }
  int first_head() const { return kvh_begin * group; }
};

// Computes segment `seg` of every row-head of (tile, heads) whose row
// reaches it into st. Chunks are the outer loop, so with several KV heads a
// chunk's K/V rows (adjacent in the cache) are read together.
void RunSegment(const Ctx& c, const Tile& tile, const HeadRange& hr, int seg, SegmentState& st) {
  const int hd = c.shape.head_dim;
  const int32_t start = seg * kSegment;
  const int32_t stop = std::min(start + kSegment, tile.limit);
  const float* k[kChunk];
  const float* v[kChunk];
  for (int32_t c0 = start; c0 < stop; c0 += kChunk) {
    const bool first = c0 == start;
    const int n_keys = std::min(kChunk, tile.limit - c0);
    for (int kvh = hr.kvh_begin; kvh < hr.kvh_end; ++kvh) {
      ChunkRows(c, tile.table, c0, n_keys, kvh, k, v);
      for (int32_t r = tile.row_begin; r < tile.row_end; ++r) {
        const int32_t pos = c.rows[r].pos;
        if (pos < c0) continue;  // causal: this chunk and the rest are past the row
        const int32_t lo = WindowStart(c.shape, pos);
        if (lo >= c0 + kChunk) continue;  // the whole chunk is before the window
        const int n_valid = std::min(kChunk, pos + 1 - c0);
        const int n_skip = std::max(0, lo - c0);
        // The row's first chunk of this segment starts its state.
        const bool row_first = first || c0 == (lo / kChunk) * kChunk;
        for (int h = kvh * c.group; h < (kvh + 1) * c.group; ++h) {
          const int rh = (r - tile.row_begin) * hr.heads() + (h - hr.first_head());
          FoldChunk(c.q + r * c.stride + int64_t{h} * hd, k, v, n_valid, hd, c.shape.scale,
                    c.shape.softcap, n_skip, row_first, st.m[rh], st.l[rh],
                    st.o.data() + int64_t{rh} * hd);
        }
      }
    }
  }
}

// kPerTile: all segments of (tile, heads) in order, merged as they finish.
void RunTile(const Ctx& c, const Tile& tile, const HeadRange& hr) {
  thread_local SegmentState seg, total;
  const int hd = c.shape.head_dim;
  const int row_heads = (tile.row_end - tile.row_begin) * hr.heads();
  seg.Resize(row_heads, hd);
  total.Resize(row_heads, hd);
  for (int s = tile.first_segment(); s < tile.end_segment(); ++s) {
    RunSegment(c, tile, hr, s, seg);
    for (int32_t r = tile.row_begin; r < tile.row_end; ++r) {
      const int32_t pos = c.rows[r].pos;
      if (!RowInSegment(c.shape, pos, s)) continue;
      const bool first = s == WindowStart(c.shape, pos) / kSegment;
      for (int j = 0; j < hr.heads(); ++j) {
        const int rh = (r - tile.row_begin) * hr.heads() + j;
        MergeInto(total.m[rh], total.l[rh], total.o.data() + int64_t{rh} * hd, seg.m[rh],
                  seg.l[rh], seg.o.data() + int64_t{rh} * hd, hd, first);
      }
    }
  }
  for (int32_t r = tile.row_begin; r < tile.row_end; ++r) {
    for (int j = 0; j < hr.heads(); ++j) {
      const int rh = (r - tile.row_begin) * hr.heads() + j;
      Finalize(total.o.data() + int64_t{rh} * hd, total.l[rh],
               c.out + r * c.stride + int64_t{hr.first_head() + j} * hd, hd);
    }
  }
}

// Runs fn(i) for i in [0, n) on the pool, handing out indices one at a time
// (tasks differ in cost; which thread runs one never changes its result).
template <typename Fn>
void RunTasks(ThreadPool& pool, int64_t n, const Fn& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  pool.ParallelFor(std::min<int64_t>(n, pool.size()), [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
  });
}

}  // namespace

float AttentionExp(float x) { return ExpScalar(x); }

void PagedAttention(const AttentionShape& shape, const PagedKvView& kv,
                    std::span<const AttentionRow> rows, const float* q, float* out,
                    ThreadPool& pool, AttentionPlan plan) {
  if (rows.empty()) return;
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.n_heads % shape.n_kv_heads != 0 || kv.block_size <= 0 || shape.window < 0 ||
      !(shape.softcap >= 0.0f)) {
    throw std::invalid_argument("PagedAttention: bad shape");
  }
  const Ctx c{shape, kv, rows.data(), q, out, shape.n_heads / shape.n_kv_heads,
              int64_t{shape.n_heads} * shape.head_dim};
  const int hd = shape.head_dim;

  // Tiles: runs of consecutive rows of one sequence, at most kTileRows long.
  std::vector<Tile> tiles;
  for (int32_t r = 0; r < static_cast<int32_t>(rows.size()); ++r) {
    if (rows[r].pos < 0) throw std::invalid_argument("PagedAttention: negative position");
    if (tiles.empty() || tiles.back().table != rows[r].block_table ||
        tiles.back().row_end - tiles.back().row_begin == kTileRows) {
      tiles.push_back(Tile{r, r, rows[r].block_table, 0, WindowStart(shape, rows[r].pos)});
    }
    Tile& t = tiles.back();
    t.row_end = r + 1;
    t.limit = std::max(t.limit, rows[r].pos + 1);
    t.low = std::min(t.low, WindowStart(shape, rows[r].pos));
  }
  int max_segments = 1;
  for (const Tile& t : tiles) max_segments = std::max(max_segments, t.end_segment());
  const int64_t n_kv = shape.n_kv_heads;
  const int64_t tile_tasks = static_cast<int64_t>(tiles.size()) * n_kv;
  const int64_t partial_floats =
      static_cast<int64_t>(rows.size()) * shape.n_heads * max_segments * (hd + 2);

  if (plan == AttentionPlan::kAuto) {
    const bool few = pool.size() > 1 && tile_tasks < 2 * int64_t{pool.size()};
    plan = few && max_segments > 1 && partial_floats <= (int64_t{1} << 22) ? AttentionPlan::kSplitK
                                                                            : AttentionPlan::kPerTile;
  }

  if (plan == AttentionPlan::kPerTile) {
    // Costliest tiles first, so the last tasks handed out are short.
    std::vector<int32_t> order(tiles.size());
    std::iota(order.begin(), order.end(), 0);
    auto cost = [&](int32_t i) {
      return int64_t{tiles[i].limit} * (tiles[i].row_end - tiles[i].row_begin);
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return cost(a) > cost(b); });
    RunTasks(pool, tile_tasks, [&](int64_t i) {
      const int kvh = static_cast<int>(i % n_kv);
      RunTile(c, tiles[order[i / n_kv]], HeadRange{kvh, kvh + 1, c.group});
    });
    return;
  }

  // kSplitK: one task per (tile, KV heads, segment) writes each of its
  // row-heads' (m, l, o) to partial[row][head][segment]; then every row-head
  // merges its segments in order, exactly as RunTile does. A task takes all
  // KV heads (their K/V rows are adjacent in the cache, so it reads whole
  // rows: decode is bound by streaming the cache) unless that leaves too few
  // tasks for the pool.
  // (Reused across calls by the calling thread; the tasks get its address,
  // not their own thread's instance.)
  thread_local std::vector<float> partial_store;
  partial_store.resize(partial_floats);
  float* const partial = partial_store.data();
  const int64_t slot = hd + 2;
  auto at = [partial, slot, &shape, max_segments](int64_t r, int h, int s) {
    return partial + ((r * shape.n_heads + h) * max_segments + s) * slot;
  };
  int64_t segment_tasks = 0;
  for (const Tile& t : tiles) segment_tasks += t.segments();
  const int64_t kv_groups = segment_tasks >= 2 * int64_t{pool.size()} ? 1 : n_kv;
  const int kv_per_task = static_cast<int>(n_kv / kv_groups);
  std::vector<int64_t> task_start(tiles.size() + 1, 0);  // prefix sums of tasks per tile
  for (size_t t = 0; t < tiles.size(); ++t) {
    task_start[t + 1] = task_start[t] + kv_groups * tiles[t].segments();
  }
  RunTasks(pool, task_start.back(), [&](int64_t i) {
    const size_t t = std::upper_bound(task_start.begin(), task_start.end(), i) - task_start.begin() - 1;
    const Tile& tile = tiles[t];
    const int64_t local = i - task_start[t];
    const int kvh = static_cast<int>(local % kv_groups) * kv_per_task;
    const HeadRange hr{kvh, kvh + kv_per_task, c.group};
    const int s = tile.first_segment() + static_cast<int>(local / kv_groups);
    thread_local SegmentState st;
    st.Resize((tile.row_end - tile.row_begin) * hr.heads(), hd);
    RunSegment(c, tile, hr, s, st);
    for (int32_t r = tile.row_begin; r < tile.row_end; ++r) {
      if (!RowInSegment(shape, rows[r].pos, s)) continue;
      for (int j = 0; j < hr.heads(); ++j) {
        const int rh = (r - tile.row_begin) * hr.heads() + j;
        float* dst = at(r, hr.first_head() + j, s);
        dst[0] = st.m[rh];
        dst[1] = st.l[rh];
        std::memcpy(dst + 2, st.o.data() + int64_t{rh} * hd, sizeof(float) * hd);
      }
    }
  });
  std::vector<float> total(hd);
  for (int64_t r = 0; r < static_cast<int64_t>(rows.size()); ++r) {
    const int first_segment = WindowStart(shape, rows[r].pos) / kSegment;
    const int segments = rows[r].pos / kSegment + 1;
    for (int h = 0; h < shape.n_heads; ++h) {
      float M = 0, L = 0;
      for (int s = first_segment; s < segments; ++s) {
        const float* p = at(r, h, s);
        MergeInto(M, L, total.data(), p[0], p[1], p + 2, hd, s == first_segment);
      }
      Finalize(total.data(), L, out + r * c.stride + int64_t{h} * hd, hd);
    }
  }
}

}  // namespace specline::kernels
