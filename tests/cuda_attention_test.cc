// Paged attention on the GPU (kernels/cuda/attention.cu) against a plain CPU
// paged attention in double on the same bf16/fp16-rounded q, K and V.
//
// The caches hold each sequence in shuffled physical blocks; every cache slot
// that no sequence position owns (unused blocks, the tail of a sequence's
// last block, the spare block-table entries) is NaN, so a read past a row's
// keys poisons its output. Outputs (and the decode workspace) start as 0xFF
// bytes (NaN), so a row that is not written fails, and rows that must not be
// written are checked to still hold the poison.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda_test_util.h"

namespace specline {
namespace {

using cuda::DeviceBuffer;
using testing::Download;
using testing::FromHalfBits;
using testing::RelativeError;
using testing::ToHalfBits;
using testing::Upload;

struct Shape {
  DType t;
  int head_dim;
  int n_heads;
  int n_kv_heads;
  int block_size;
};

std::string Name(const Shape& s) {
  return std::string(s.t == DType::kBF16 ? "bf16" : "f16") + "_d" + std::to_string(s.head_dim) +
         "_h" + std::to_string(s.n_heads) + "_kv" + std::to_string(s.n_kv_heads) + "_bs" +
         std::to_string(s.block_size);
}

double Tolerance(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }

// One layer's paged cache holding `seq_lens[s]` positions of each sequence.
struct Cache {
  int max_blocks = 0;
  std::vector<int32_t> block_tables;  // [n_seqs][max_blocks]
  std::vector<float> k, v;            // rounded values, NaN where no position lives
  DeviceBuffer k_dev, v_dev, tables_dev;

  int64_t Row(const Shape& s, int seq, int pos) const {  // element offset of (seq, pos, kv head 0)
    const int blk = block_tables[static_cast<size_t>(seq) * max_blocks + pos / s.block_size];
    return (static_cast<int64_t>(blk) * s.block_size + pos % s.block_size) * s.n_kv_heads *
           s.head_dim;
  }
};

Cache MakeCache(const Shape& s, const std::vector<int>& seq_lens, std::mt19937& rng) {
  Cache c;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int used = 0;
  for (int len : seq_lens) {
    const int blocks = (len + s.block_size - 1) / s.block_size;
    c.max_blocks = std::max(c.max_blocks, blocks);
    used += blocks;
  }
  c.max_blocks += 2;  // spare entries, pointing at a NaN block
  const int num_blocks = used + 3;
  std::vector<int32_t> phys(num_blocks);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  const int32_t nan_block = phys.back();  // never given to a sequence
  c.block_tables.assign(seq_lens.size() * c.max_blocks, nan_block);
  int next = 0;
  for (size_t q = 0; q < seq_lens.size(); ++q) {
    const int blocks = (seq_lens[q] + s.block_size - 1) / s.block_size;
    for (int j = 0; j < blocks; ++j) c.block_tables[q * c.max_blocks + j] = phys[next++];
  }
  const size_t row = static_cast<size_t>(s.n_kv_heads) * s.head_dim;
  c.k.assign(static_cast<size_t>(num_blocks) * s.block_size * row, nan);
  c.v.assign(c.k.size(), nan);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (size_t q = 0; q < seq_lens.size(); ++q) {
    for (int p = 0; p < seq_lens[q]; ++p) {
      const int64_t at = c.Row(s, static_cast<int>(q), p);
      for (size_t e = 0; e < row; ++e) {
        c.k[at + e] = uni(rng);
        c.v[at + e] = uni(rng);
      }
    }
  }
  const std::vector<uint16_t> kb = ToHalfBits(s.t, c.k);
  const std::vector<uint16_t> vb = ToHalfBits(s.t, c.v);
  c.k = FromHalfBits(s.t, kb);
  c.v = FromHalfBits(s.t, vb);
  c.k_dev = Upload(kb);
  c.v_dev = Upload(vb);
  c.tables_dev = Upload(c.block_tables);
  return c;
}

// Query rows: [n][q_stride], head h of row i at i * q_stride + h * head_dim
// (q_stride as in a fused qkv output, plus `pad`).
struct Queries {
  int stride = 0;
  std::vector<float> q;  // rounded
  DeviceBuffer dev;
};

Queries MakeQueries(const Shape& s, int n, int pad, std::mt19937& rng) {
  Queries r;
  r.stride = (s.n_heads + 2 * s.n_kv_heads) * s.head_dim + pad;
  std::vector<float> q(static_cast<size_t>(n) * r.stride);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);  // peaky enough softmaxes
  for (float& x : q) x = uni(rng);
  const std::vector<uint16_t> bits = ToHalfBits(s.t, q);
  r.q = FromHalfBits(s.t, bits);
  r.dev = Upload(bits);
  return r;
}

// Gemma's sliding window and score soft cap, for the calls and the
// reference alike; the Gemma tests set them for their scope (WithGemma) so
// the helpers below keep their signatures.
struct GemmaAttention {
  int window = 0;
  float softcap = 0.0f;
};
GemmaAttention g_gemma;
struct WithGemma {
  explicit WithGemma(GemmaAttention g) { g_gemma = g; }
  ~WithGemma() { g_gemma = GemmaAttention{}; }
};

// out[h * head_dim + d] of row i, in double.
std::vector<float> ReferenceRow(const Shape& s, const Cache& c, const Queries& q, int i, int seq,
                                int len, float scale) {
  const int D = s.head_dim;
  const int group = s.n_heads / s.n_kv_heads;
  std::vector<float> out(static_cast<size_t>(s.n_heads) * D);
  std::vector<double> w(len);
  for (int h = 0; h < s.n_heads; ++h) {
    const int kvh = h / group;
    const float* qv = q.q.data() + static_cast<size_t>(i) * q.stride + static_cast<size_t>(h) * D;
    double mx = -std::numeric_limits<double>::infinity();
    const int lo = g_gemma.window > 0 ? std::max(0, len - g_gemma.window) : 0;
    for (int p = lo; p < len; ++p) {
      const float* kv = c.k.data() + c.Row(s, seq, p) + static_cast<size_t>(kvh) * D;
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += double{qv[d]} * double{kv[d]};
      w[p] = dot * scale;
      if (g_gemma.softcap > 0) w[p] = g_gemma.softcap * std::tanh(w[p] / g_gemma.softcap);
      mx = std::max(mx, w[p]);
    }
    double sum = 0;
    for (int p = lo; p < len; ++p) sum += (w[p] = std::exp(w[p] - mx));
    std::vector<double> acc(D, 0.0);
    for (int p = lo; p < len; ++p) {
      const float* vv = c.v.data() + c.Row(s, seq, p) + static_cast<size_t>(kvh) * D;
      for (int d = 0; d < D; ++d) acc[d] += w[p] * double{vv[d]};
    }
    for (int d = 0; d < D; ++d) out[static_cast<size_t>(h) * D + d] = static_cast<float>(acc[d] / sum);
  }
  return out;
}

DeviceBuffer PoisonedOutput(const Shape& s, int n) {
  DeviceBuffer out(std::max<size_t>(static_cast<size_t>(n) * s.n_heads * s.head_dim * 2, 1));
  SPECLINE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));
  return out;
}

cuda::PagedAttentionParams Params(const Shape& s, const Queries& q, const Cache& c,
                                  const DeviceBuffer& out, const DeviceBuffer& row_seq,
                                  const DeviceBuffer& row_len, int n, int max_len) {
  cuda::PagedAttentionParams p;
  p.t = s.t;
  p.q = q.dev.get();
  p.q_stride = q.stride;
  p.out = out.get();
  p.k_cache = c.k_dev.get();
  p.v_cache = c.v_dev.get();
  p.block_tables = c.tables_dev.as<int32_t>();
  p.max_blocks = c.max_blocks;
  p.row_seq = row_seq.as<int32_t>();
  p.row_len = row_len.as<int32_t>();
  p.n = n;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.max_len = max_len;
  p.window = g_gemma.window;
  p.softcap = g_gemma.softcap;
  return p;
}

// Checks rows `which` of `got` (all n rows of the output, as 16-bit words)
// against the reference, and that every other row still holds the poison.
void ExpectRows(const Shape& s, const Cache& c, const Queries& q, const std::vector<uint16_t>& got,
                const std::vector<int32_t>& row_seq, const std::vector<int32_t>& row_len,
                const std::vector<int>& which, float scale, const std::string& what) {
  const size_t width = static_cast<size_t>(s.n_heads) * s.head_dim;
  std::vector<bool> checked(row_seq.size(), false);
  for (int i : which) {
    checked[i] = true;
    const std::vector<uint16_t> bits(got.begin() + i * width, got.begin() + (i + 1) * width);
    const std::vector<float> ref = ReferenceRow(s, c, q, i, row_seq[i], row_len[i], scale);
    EXPECT_LT(RelativeError(FromHalfBits(s.t, bits), ref), Tolerance(s.t))
        << what << ": row " << i << " (len " << row_len[i] << ")";
  }
  for (size_t i = 0; i < row_seq.size(); ++i) {
    if (checked[i]) continue;
    for (size_t e = 0; e < width; ++e) {
      if (got[i * width + e] != 0xFFFF) {
        ADD_FAILURE() << what << ": row " << i << " was written but is not in the call";
        break;
      }
    }
  }
}

// Decode of rows with lengths `lens` (row i reads sequence perm[i]), over all
// rows or over `subset`, with the grid bound `max_len`.
void RunDecode(const Shape& s, const std::vector<int>& lens, int max_len,
               const std::vector<int>* subset, int pad, uint32_t seed) {
  std::mt19937 rng(seed);
  const int n = static_cast<int>(lens.size());
  std::vector<int32_t> row_seq(n);
  std::iota(row_seq.begin(), row_seq.end(), 0);
  std::shuffle(row_seq.begin(), row_seq.end(), rng);
  std::vector<int> seq_lens(n);
  std::vector<int32_t> row_len(n);
  for (int i = 0; i < n; ++i) {
    row_len[i] = lens[i];
    seq_lens[row_seq[i]] = lens[i] + static_cast<int>(rng() % 3);  // cached keys past row_len
  }
  const Cache c = MakeCache(s, seq_lens, rng);
  const Queries q = MakeQueries(s, n, pad, rng);
  const DeviceBuffer out = PoisonedOutput(s, n);
  const DeviceBuffer seq_dev = Upload(row_seq);
  const DeviceBuffer len_dev = Upload(row_len);
  const size_t ws_bytes = cuda::DecodeWorkspaceBytes(n, s.n_heads, s.head_dim, max_len);
  DeviceBuffer ws;
  if (ws_bytes > 0) {
    ws.Resize(ws_bytes);
    SPECLINE_CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws_bytes));
  }
  const cuda::PagedAttentionParams p = Params(s, q, c, out, seq_dev, len_dev, n, max_len);
  std::vector<int> which;
  if (subset != nullptr) {
    which = *subset;
    const std::vector<int32_t> rows(subset->begin(), subset->end());
    const DeviceBuffer rows_dev = Upload(rows);
    cuda::PagedAttentionDecode(p, rows_dev.as<int32_t>(), static_cast<int>(rows.size()), ws.get(),
                               nullptr);
    SPECLINE_CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    which.resize(n);
    std::iota(which.begin(), which.end(), 0);
    cuda::PagedAttentionDecode(p, nullptr, n, ws.get(), nullptr);
  }
  const std::vector<uint16_t> got =
      Download<uint16_t>(out, static_cast<size_t>(n) * s.n_heads * s.head_dim);
  ExpectRows(s, c, q, got, row_seq, row_len, which, p.scale, "decode " + Name(s));
}

// --------------------------------------------------------------------- decode

class DecodeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DecodeTest, MatchesReference) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape s = GetParam();
  // Several splits, lengths that are multiples of nothing, and a grid bound
  // above every row's length (as a captured CUDA graph has).
  RunDecode(s, {1, 5, 300, 1025, 4096}, 4096, nullptr, 0, 1);
  RunDecode(s, {7, 64, 129, 513}, 6000, nullptr, 2, 2);
}

const Shape kShapes[] = {
    {DType::kBF16, 8, 2, 2, 1},     {DType::kF16, 8, 9, 3, 7},
    {DType::kBF16, 64, 8, 2, 16},   {DType::kF16, 64, 9, 3, 32},
    {DType::kBF16, 64, 4, 4, 7},    {DType::kBF16, 128, 9, 3, 16},
    {DType::kF16, 128, 4, 4, 16},   {DType::kF16, 128, 8, 2, 1},
    {DType::kBF16, 128, 32, 8, 32}, {DType::kF16, 10, 8, 2, 16},
    {DType::kBF16, 96, 4, 1, 16},   {DType::kF16, 256, 2, 1, 32},
    {DType::kBF16, 64, 16, 1, 16},  {DType::kF16, 128, 12, 2, 16},
};

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeTest, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return Name(info.param);
                         });

// Gemma: sliding windows (inside one split, across splits, longer than the
// row) and a score soft cap, on the split-K decode (splits wholly before the
// window are skipped, and the combine skips them too).
TEST_P(DecodeTest, SlidingWindowAndSoftcapMatchReference) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape s = GetParam();
  for (const GemmaAttention g : {GemmaAttention{17, 0.0f}, GemmaAttention{512, 5.0f},
                                 GemmaAttention{5000, 2.0f}}) {
    const WithGemma scope(g);
    RunDecode(s, {1, 5, 300, 1025, 4096}, 4096, nullptr, 0, 3);
  }
}

TEST(CudaAttention, DecodeSingleSplitNeedsNoWorkspace) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{DType::kBF16, 64, 4, 2, 16}, Shape{DType::kF16, 128, 9, 3, 7}}) {
    ASSERT_EQ(cuda::DecodeWorkspaceBytes(3, s.n_heads, s.head_dim, 64), 0u);
    RunDecode(s, {1, 5, 64}, 64, nullptr, 0, 3);
  }
}

TEST(CudaAttention, DecodeLargeBatchLongSplits) {
  SPECLINE_SKIP_WITHOUT_GPU();
  // n * n_heads large: 512-key splits (96 x 8 heads), 256-key splits
  // (48 x 9 heads) and 128-key splits (24 x 9 heads).
  std::mt19937 rng(4);
  std::vector<int> lens(96);
  for (int& l : lens) l = 1 + static_cast<int>(rng() % 1600);
  RunDecode({DType::kBF16, 64, 8, 2, 16}, lens, 1600, nullptr, 0, 5);
  lens.resize(48);
  RunDecode({DType::kF16, 128, 9, 3, 16}, lens, 1600, nullptr, 0, 6);
  lens.resize(24);
  RunDecode({DType::kBF16, 8, 9, 9, 7}, lens, 1600, nullptr, 0, 14);
}

TEST(CudaAttention, DecodeSubsetOfRows) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const std::vector<int> subset = {3, 0, 5};
  RunDecode({DType::kBF16, 64, 9, 3, 16}, {40, 700, 3, 1025, 9, 2000}, 2048, &subset, 0, 7);
  RunDecode({DType::kF16, 8, 4, 1, 7}, {40, 700, 3, 1025, 9, 20}, 4096, &subset, 0, 8);
  RunDecode({DType::kF16, 128, 4, 2, 16}, {40, 7, 3, 64, 9, 20}, 64, &subset, 0, 9);
}

// The decode grid depends only on max_len: a graph captured once replays
// correctly while the rows' lengths change.
TEST(CudaAttention, DecodeGraphReplayAsSequencesGrow) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 128, 8, 2, 16};
  std::mt19937 rng(10);
  const int n = 3;
  const int max_len = 2048;
  const std::vector<int32_t> row_seq = {2, 0, 1};
  const Cache c = MakeCache(s, {max_len, max_len, max_len}, rng);
  const Queries q = MakeQueries(s, n, 0, rng);
  const DeviceBuffer out = PoisonedOutput(s, n);
  const DeviceBuffer seq_dev = Upload(row_seq);
  std::vector<int32_t> row_len = {1, 2, 3};
  const DeviceBuffer len_dev = Upload(row_len);
  DeviceBuffer ws(std::max<size_t>(cuda::DecodeWorkspaceBytes(n, s.n_heads, s.head_dim, max_len), 1));
  const cuda::PagedAttentionParams p = Params(s, q, c, out, seq_dev, len_dev, n, max_len);

  cudaStream_t stream;
  SPECLINE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  SPECLINE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cuda::PagedAttentionDecode(p, nullptr, n, ws.get(), stream);
  SPECLINE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  SPECLINE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const std::vector<std::vector<int32_t>> steps = {
      {1, 2, 3}, {300, 1, 64}, {1025, 511, 512}, {2048, 1500, 7}, {5, 5, 5}};
  const std::vector<int> all = {0, 1, 2};
  for (const auto& lens : steps) {
    SPECLINE_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));
    SPECLINE_CUDA_CHECK(
        cudaMemcpy(len_dev.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    SPECLINE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> got =
        Download<uint16_t>(out, static_cast<size_t>(n) * s.n_heads * s.head_dim);
    ExpectRows(s, c, q, got, row_seq, lens, all, p.scale,
               "graph replay, len " + std::to_string(lens[0]));
  }
  SPECLINE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  SPECLINE_CUDA_CHECK(cudaGraphDestroy(graph));
  SPECLINE_CUDA_CHECK(cudaStreamDestroy(stream));
}

// -------------------------------------------------------------------- prefill

struct TileSpec {
  int seq;
  int start;  // position of the tile's first row
  int rows;
};

// Rows of each tile are consecutive positions of one sequence, row_len =
// position + 1 (causal); one extra row at the end belongs to no tile and must
// stay poisoned.
void RunPrefill(const Shape& s, const std::vector<int>& seq_lens,
                const std::vector<TileSpec>& tiles, int pad, uint32_t seed) {
  std::mt19937 rng(seed);
  const Cache c = MakeCache(s, seq_lens, rng);
  std::vector<int32_t> row_seq, row_len, first, count;
  std::vector<int> which;
  for (const TileSpec& t : tiles) {
    first.push_back(static_cast<int32_t>(row_seq.size()));
    count.push_back(t.rows);
    for (int r = 0; r < t.rows; ++r) {
      which.push_back(static_cast<int>(row_seq.size()));
      row_seq.push_back(t.seq);
      row_len.push_back(t.start + r + 1);
    }
  }
  row_seq.push_back(0);  // not in any tile
  row_len.push_back(1);
  const int n = static_cast<int>(row_seq.size());
  const Queries q = MakeQueries(s, n, pad, rng);
  const DeviceBuffer out = PoisonedOutput(s, n);
  const DeviceBuffer seq_dev = Upload(row_seq);
  const DeviceBuffer len_dev = Upload(row_len);
  const DeviceBuffer first_dev = Upload(first);
  const DeviceBuffer count_dev = Upload(count);
  const cuda::PagedAttentionParams p = Params(s, q, c, out, seq_dev, len_dev, n, 0);
  cuda::PagedAttentionPrefill(p, first_dev.as<int32_t>(), count_dev.as<int32_t>(),
                              static_cast<int>(tiles.size()), nullptr);
  const std::vector<uint16_t> got =
      Download<uint16_t>(out, static_cast<size_t>(n) * s.n_heads * s.head_dim);
  ExpectRows(s, c, q, got, row_seq, row_len, which, p.scale, "prefill " + Name(s));
}

class PrefillTest : public ::testing::TestWithParam<Shape> {};

TEST_P(PrefillTest, MatchesReference) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape s = GetParam();
  const std::vector<int> seq_lens = {100, 600, 70, 37, 1};
  const std::vector<TileSpec> tiles = {
      {0, 0, 64},   // a full tile from the start
      {1, 500, 64}, // a mid-sequence chunk: 500 earlier keys are cached
      {0, 64, 36},  // the rest of sequence 0 (second tile of it)
      {2, 0, 1},    // one row
      {1, 599, 1},  // the last position only
      {2, 40, 17},  // rows not a multiple of 16
      {3, 0, 37},   //
      {4, 0, 1},    // a one-key sequence
      {2, 3, 33},   // overlaps another tile's positions (different rows)
  };
  RunPrefill(s, seq_lens, tiles, 0, 11);
  RunPrefill(s, seq_lens, {{1, 130, 50}, {1, 300, 64}}, 2, 12);  // q rows not 16-byte aligned
}

// Gemma on the prefill kernels (wmma for head_dim 64 / 128, generic else).
TEST_P(PrefillTest, SlidingWindowAndSoftcapMatchReference) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape s = GetParam();
  const std::vector<int> seq_lens = {100, 600, 70};
  const std::vector<TileSpec> tiles = {{0, 0, 64}, {1, 500, 64}, {0, 64, 36}, {2, 40, 17}};
  for (const GemmaAttention g : {GemmaAttention{24, 0.0f}, GemmaAttention{100, 4.0f}}) {
    const WithGemma scope(g);
    RunPrefill(s, seq_lens, tiles, 0, 13);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillTest, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return Name(info.param);
                         });

// ----------------------------------------------------------------- contracts

TEST(CudaAttention, EmptyCallsLaunchNothing) {
  SPECLINE_SKIP_WITHOUT_GPU();
  cuda::PagedAttentionParams p;
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.max_len = 128;
  EXPECT_NO_THROW(cuda::PagedAttentionDecode(p, nullptr, 0, nullptr, nullptr));
  p.n = 4;
  const DeviceBuffer rows(4);
  EXPECT_NO_THROW(cuda::PagedAttentionDecode(p, rows.as<int32_t>(), 0, nullptr, nullptr));
  EXPECT_NO_THROW(cuda::PagedAttentionPrefill(p, nullptr, nullptr, 0, nullptr));
  EXPECT_EQ(cuda::DecodeWorkspaceBytes(0, 4, 64, 128), 0u);
  SPECLINE_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaAttention, RejectsOtherTypesAndShapes) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 64, 4, 2, 16};
  std::mt19937 rng(13);
  const Cache c = MakeCache(s, {20}, rng);
  const Queries q = MakeQueries(s, 1, 0, rng);
  const DeviceBuffer out = PoisonedOutput(s, 1);
  const DeviceBuffer seq_dev = Upload(std::vector<int32_t>{0});
  const DeviceBuffer len_dev = Upload(std::vector<int32_t>{20});
  const DeviceBuffer tile_dev = Upload(std::vector<int32_t>{0});
  const DeviceBuffer rows_dev = Upload(std::vector<int32_t>{1});
  cuda::PagedAttentionParams p = Params(s, q, c, out, seq_dev, len_dev, 1, 64);
  DeviceBuffer ws(std::max<size_t>(cuda::DecodeWorkspaceBytes(1, 4, 64, 64), 1));
  for (DType t : {DType::kF32, DType::kQ8_0}) {
    p.t = t;
    EXPECT_THROW(cuda::PagedAttentionDecode(p, nullptr, 1, ws.get(), nullptr),
                 std::invalid_argument);
    EXPECT_THROW(cuda::PagedAttentionPrefill(p, tile_dev.as<int32_t>(), rows_dev.as<int32_t>(), 1,
                                             nullptr),
                 std::invalid_argument);
  }
  p.t = s.t;
  p.head_dim = 7;
  EXPECT_THROW(cuda::PagedAttentionDecode(p, nullptr, 1, ws.get(), nullptr), std::invalid_argument);
  p.head_dim = 64;
  p.n_kv_heads = 3;
  EXPECT_THROW(cuda::PagedAttentionDecode(p, nullptr, 1, ws.get(), nullptr), std::invalid_argument);
  SPECLINE_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace specline
