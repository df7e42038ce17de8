// Tests of the CPU paged attention kernel (kernels/cpu/attention.h): against
// a double-precision naive softmax attention for GQA and MHA shapes, head
// sizes that are and are not multiples of 8, context lengths around the chunk
// (16) and segment (256) boundaries and KV block sizes that do not divide
// them; and the invariant speculative decoding relies on: a row's output bits
// do not depend on the other rows of the batch, the thread count or the work
// split (compared with memcmp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"

namespace specline::kernels {
namespace {

struct Shape {
  int n_heads, n_kv_heads, head_dim;
};

// A paged store of K/V for a few sequences with scattered (shuffled) blocks.
// Positions past a sequence's length inside its last block hold NaN, as stale
// data might: the kernel must never let them reach a result.
class PagedStore {
 public:
  PagedStore(const Shape& s, int block_size, const std::vector<int>& lengths, uint32_t seed)
      : shape_(s), bs_(block_size), lengths_(lengths) {
    row_ = int64_t{s.n_kv_heads} * s.head_dim;
    int total_blocks = 0;
    for (int len : lengths) total_blocks += (len + bs_ - 1) / bs_;
    total_blocks += 3;  // unused blocks in between
    std::vector<int32_t> ids(total_blocks);
    for (int i = 0; i < total_blocks; ++i) ids[i] = i;
    std::mt19937 rng(seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    k_.assign(int64_t{total_blocks} * bs_ * row_, std::numeric_limits<float>::quiet_NaN());
    v_ = k_;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int next = 0;
    for (int len : lengths) {
      std::vector<int32_t> table;
      for (int b = 0; b < (len + bs_ - 1) / bs_; ++b) table.push_back(ids[next++]);
      tables_.push_back(table);
      for (int t = 0; t < len; ++t) {
        for (int64_t e = 0; e < row_; ++e) {
          K(tables_.size() - 1, t)[e] = nd(rng);
          V(tables_.size() - 1, t)[e] = nd(rng);
        }
      }
    }
  }

  float* K(size_t seq, int t) { return k_.data() + Offset(seq, t); }
  float* V(size_t seq, int t) { return v_.data() + Offset(seq, t); }
  const int32_t* table(size_t seq) const { return tables_[seq].data(); }

  PagedKvView View() const {
    return PagedKvView{k_.data(), v_.data(), bs_ * row_, row_, bs_};
  }

 private:
  int64_t Offset(size_t seq, int t) const {
    return int64_t{tables_[seq][t / bs_]} * bs_ * row_ + int64_t{t % bs_} * row_;
  }
  Shape shape_;
  int bs_;
  int64_t row_;
  std::vector<int> lengths_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<float> k_, v_;
};

struct Query {
  size_t seq;
  int32_t pos;
};

std::vector<float> RandomQ(const Shape& s, size_t n, uint32_t seed, float magnitude = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, magnitude);
  std::vector<float> q(n * s.n_heads * s.head_dim);
  for (float& x : q) x = nd(rng);
  return q;
}

std::vector<float> RunAttention(const Shape& s, PagedStore& store, const std::vector<Query>& queries,
                       const float* q, ThreadPool& pool,
                       AttentionPlan plan = AttentionPlan::kAuto) {
  std::vector<AttentionRow> rows;
  for (const Query& x : queries) rows.push_back({store.table(x.seq), x.pos});
  std::vector<float> out(queries.size() * s.n_heads * s.head_dim, -1.0f);
  AttentionShape shape{s.n_heads, s.n_kv_heads, s.head_dim,
                       1.0f / std::sqrt(static_cast<float>(s.head_dim))};
  PagedAttention(shape, store.View(), rows, q, out.data(), pool, plan);
  return out;
}

// Double-precision softmax(q.k * scale) . v over [0, pos].
std::vector<double> Reference(const Shape& s, PagedStore& store, const std::vector<Query>& queries,
                              const float* q) {
  const int hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(queries.size() * s.n_heads * hd);
  for (size_t i = 0; i < queries.size(); ++i) {
    for (int h = 0; h < s.n_heads; ++h) {
      const float* qh = q + (i * s.n_heads + h) * hd;
      const int kvh = h / group;
      const int len = queries[i].pos + 1;
      std::vector<double> w(len);
      double mx = -1e300;
      for (int t = 0; t < len; ++t) {
        const float* k = store.K(queries[i].seq, t) + kvh * hd;
        double d = 0;
        for (int e = 0; e < hd; ++e) d += double(qh[e]) * k[e];
        w[t] = d * scale;
        mx = std::max(mx, w[t]);
      }
      double sum = 0;
      for (double& x : w) sum += (x = std::exp(x - mx));
      double* o = out.data() + (i * s.n_heads + h) * hd;
      for (int t = 0; t < len; ++t) {
        const float* v = store.V(queries[i].seq, t) + kvh * hd;
        for (int e = 0; e < hd; ++e) o[e] += w[t] / sum * v[e];
      }
    }
  }
  return out;
}

const Shape kShapes[] = {
    {9, 3, 64},   // SmolLM2-135M: GQA group 3
    {4, 4, 64},   // MHA
    {8, 2, 128},  // GQA group 4, head_dim 128
    {4, 2, 12},   // head_dim not a multiple of 8 (the stage slice tests' model)
    {8, 4, 8},    // stories260K
};

// Rows of two sequences in one batch: a prefill-like run of consecutive
// positions of sequence 0 (more than one tile), decode rows of sequence 1
// between them, and a few of sequence 0 again out of order.
std::vector<Query> MixedBatch(int len0, int len1) {
  std::vector<Query> qs;
  for (int p = std::max(0, len0 - 21); p < len0; ++p) qs.push_back({0, p});
  qs.push_back({1, len1 - 1});
  qs.push_back({1, std::max(0, len1 - 2)});
  qs.push_back({0, len0 / 2});
  qs.push_back({0, 0});
  qs.push_back({0, len0 - 1});
  return qs;
}

TEST(PagedAttentionTest, MatchesDoubleReference) {
  ThreadPool pool(2);
  const int lengths[] = {1, 5, 16, 17, 33, 255, 256, 257, 300, 530};
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    for (int bs : {16, 8, 5, 32}) {
      for (int len : lengths) {
        const int len1 = std::max(1, len / 3 + 7);
        PagedStore store(s, bs, {len, len1}, seed++);
        const std::vector<Query> qs = MixedBatch(len, len1);
        const std::vector<float> q = RandomQ(s, qs.size(), seed++);
        const std::vector<float> got = RunAttention(s, store, qs, q.data(), pool);
        const std::vector<double> want = Reference(s, store, qs, q.data());
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(std::isfinite(got[i])) << i;
          worst = std::max(worst, std::abs(got[i] - want[i]));
        }
        EXPECT_LT(worst, 2e-6) << "heads " << s.n_heads << "/" << s.n_kv_heads << " head_dim "
                               << s.head_dim << " block " << bs << " len " << len;
      }
    }
  }
}

// Large scores (peaked softmax, a new maximum in later chunks and segments)
// exercise the rescaling; the result must still match.
TEST(PagedAttentionTest, PeakedScoresMatchReference) {
  ThreadPool pool(2);
  const Shape s{9, 3, 64};
  for (int len : {40, 700}) {
    PagedStore store(s, 16, {len, 20}, 77 + len);
    const std::vector<Query> qs = MixedBatch(len, 20);
    const std::vector<float> q = RandomQ(s, qs.size(), 99, /*magnitude=*/6.0f);
    const std::vector<float> got = RunAttention(s, store, qs, q.data(), pool);
    const std::vector<double> want = Reference(s, store, qs, q.data());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;
  }
}

TEST(PagedAttentionTest, RowBitsIndependentOfBatchThreadsAndPlan) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const Shape& s : kShapes) {
    for (int len : {17, 256, 300, 1100}) {
      const int len1 = len / 2 + 3;
      PagedStore store(s, 16, {len, len1}, 5 + len);
      // A verification-like batch: 8 consecutive positions at the end of
      // sequence 0, plus the other rows of MixedBatch.
      std::vector<Query> qs;
      for (int p = std::max(0, len - 8); p < len; ++p) qs.push_back({0, p});
      for (const Query& x : MixedBatch(len, len1)) qs.push_back(x);
      const std::vector<float> q = RandomQ(s, qs.size(), 11 + len);
      const size_t row = size_t{1} * s.n_heads * s.head_dim;
      const std::vector<float> batch = RunAttention(s, store, qs, q.data(), pool2);
      // One row per call (m = 1 decode), at each thread count and plan.
      for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
        for (AttentionPlan plan :
             {AttentionPlan::kAuto, AttentionPlan::kPerTile, AttentionPlan::kSplitK}) {
          for (size_t i = 0; i < qs.size(); ++i) {
            const std::vector<float> one = RunAttention(s, store, {qs[i]}, q.data() + i * row, *pool, plan);
            ASSERT_EQ(0, std::memcmp(one.data(), batch.data() + i * row, row * sizeof(float)))
                << "row " << i << " pos " << qs[i].pos << " len " << len << " head_dim "
                << s.head_dim << " threads " << pool->size() << " plan " << int(plan);
          }
          // The whole batch again under this pool and plan.
          const std::vector<float> again = RunAttention(s, store, qs, q.data(), *pool, plan);
          ASSERT_EQ(0, std::memcmp(again.data(), batch.data(), batch.size() * sizeof(float)))
              << "threads " << pool->size() << " plan " << int(plan);
        }
      }
      // A different grouping of the same rows: reversed order.
      std::vector<Query> rev(qs.rbegin(), qs.rend());
      std::vector<float> qrev(q.size());
      for (size_t i = 0; i < qs.size(); ++i) {
        std::copy_n(q.data() + (qs.size() - 1 - i) * row, row, qrev.data() + i * row);
      }
      const std::vector<float> out_rev = RunAttention(s, store, rev, qrev.data(), pool3);
      for (size_t i = 0; i < qs.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(out_rev.data() + (qs.size() - 1 - i) * row,
                                 batch.data() + i * row, row * sizeof(float)))
            << "reversed batch, row " << i;
      }
    }
  }
}

// The block size of the cache does not enter the arithmetic: the same K/V
// in blocks of 16 or of 8 give the same bits.
TEST(PagedAttentionTest, BitsIndependentOfKvBlockSize) {
  ThreadPool pool(2);
  const Shape s{9, 3, 64};
  const int len = 300;
  PagedStore a(s, 16, {len}, 3), b(s, 8, {len}, 4);
  for (int t = 0; t < len; ++t) {
    std::copy_n(a.K(0, t), 3 * 64, b.K(0, t));
    std::copy_n(a.V(0, t), 3 * 64, b.V(0, t));
  }
  std::vector<Query> qs;
  for (int p = 250; p < len; ++p) qs.push_back({0, p});
  const std::vector<float> q = RandomQ(s, qs.size(), 8);
  const std::vector<float> ra = RunAttention(s, a, qs, q.data(), pool);
  const std::vector<float> rb = RunAttention(s, b, qs, q.data(), pool);
  EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)));
}

TEST(PagedAttentionTest, ExpIsAccurate) {
  EXPECT_EQ(AttentionExp(0.0f), 1.0f);
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.001373f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(AttentionExp(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // ~2.5 ulp
  EXPECT_LT(AttentionExp(-1000.0f), 1e-37f);
  EXPECT_GE(AttentionExp(-1000.0f), 0.0f);
}


// The AVX2 and the portable (no -march) builds run the same operations, each
// exactly rounded, so they give the same bits: this fixed case (inputs from
// integer arithmetic, no libm) must hash to the same value in both. The
// value was taken from an x86-64-v3 build and checked against a portable
// one; a deliberate change of the kernel's arithmetic updates it.
TEST(PagedAttentionTest, GoldenBitsOnEveryBuild) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](const void* data, size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
  };
  ThreadPool pool(2);
  for (int hd : {64, 12, 128, 8}) {
    const int nh = 6, nkv = 2, bs = 16, len = 700;
    const int64_t row = int64_t{nkv} * hd;
    const int nb = (len + bs - 1) / bs;
    uint32_t state = static_cast<uint32_t>(hd);
    auto next = [&] {  // xorshift32, values in [-3, 3]
      state ^= state << 13;
      state ^= state >> 17;
      state ^= state << 5;
      return (static_cast<int>(state % 20001) - 10000) * 3e-4f;
    };
    std::vector<float> k(nb * bs * row), v(nb * bs * row);
    for (float& x : k) x = next();
    for (float& x : v) x = next();
    std::vector<int32_t> table(nb);
    for (int i = 0; i < nb; ++i) table[i] = nb - 1 - i;
    std::vector<AttentionRow> rows;
    for (int p = 0; p < len; p += 3) rows.push_back({table.data(), p});
    std::vector<float> q(rows.size() * nh * hd), out(q.size());
    for (float& x : q) x = next();
    PagedAttention({nh, nkv, hd, 0.3f}, {k.data(), v.data(), bs * row, row, bs}, rows, q.data(),
                   out.data(), pool);
    mix(out.data(), out.size() * sizeof(float));
  }
  for (float x = -90.0f; x < 1.0f; x += 0.0137f) {
    const float e = AttentionExp(x);
    mix(&e, sizeof e);
  }
  EXPECT_EQ(hash, 0xe21297fc07ae20c6ull) << "got 0x" << std::hex << hash;
}

}  // namespace
}  // namespace specline::kernels
