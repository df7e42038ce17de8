// The weight dtypes of the CPU kernels: DequantizeRow against blocks built
// byte by byte from the GGML layouts (and the portable decoders against the
// AVX2 ones), MatMul against a double-precision reference for every dtype
// (m = 1 and m > 1 bit-identical, any thread count), and the integer path's
// golden bits. Lives beside kernels/cpu/matmul.cc, as gemma.cpp keeps
// ops/matmul_test.cc.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fp16_portable.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_codec.h"
#include "kernels/dtype.h"


namespace specline::kernels {
namespace {

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                               DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                               DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                               DType::kQ6_K};

// Byte offsets of a quant block's fp16 scale(s): {d, second or -1}. The
// second is Q4_1/Q5_1's min m or a K-quant's dmin.
std::pair<int, int> ScaleOffsets(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0: return {0, -1};
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108, -1};
    case DType::kQ6_K: return {208, -1};
    default: return {-1, -1};
  }
}

uint32_t Bits(float f) { return detail::F32ToBits(f); }

// Appends a little-endian 16-bit value, as GGUF stores the block scales.
void PutU16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v & 0xff));
  out.push_back(static_cast<uint8_t>(v >> 8));
}

// ---------------------------------------------------------------------------
// DequantizeRow against blocks built byte by byte from the layout spec.

TEST(DequantizeRowTest, Q8_0HandBuiltBlocks) {
  std::vector<uint8_t> bytes;
  PutU16(bytes, 0x3800);  // d = 0.5
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(int8_t(i - 16)));
  PutU16(bytes, 0xc000);  // d = -2
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(int8_t(i * 4 - 128)));
  ASSERT_EQ(bytes.size(), 2u * BlockBytes(DType::kQ8_0));
  std::vector<float> out(64);
  DequantizeRow(DType::kQ8_0, bytes.data(), 64, out.data());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(out[i], 0.5f * (i - 16)) << i;
    EXPECT_EQ(out[32 + i], -2.0f * (i * 4 - 128)) << i;
  }
}

TEST(DequantizeRowTest, Q4_0NibbleOrder) {
  // Byte j: low nibble = element j, high nibble = element j + 16.
  std::vector<uint8_t> bytes;
  PutU16(bytes, 0x4000);  // d = 2
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  PutU16(bytes, 0x3400);  // d = 0.25
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(((j * 7) & 15) | (3 << 4)));
  ASSERT_EQ(bytes.size(), 2u * BlockBytes(DType::kQ4_0));
  std::vector<float> out(64);
  DequantizeRow(DType::kQ4_0, bytes.data(), 64, out.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(out[j + 16], 2.0f * (15 - j - 8)) << j;
    EXPECT_EQ(out[32 + j], 0.25f * (((j * 7) & 15) - 8)) << j;
    EXPECT_EQ(out[32 + j + 16], 0.25f * (3 - 8)) << j;
  }
}

TEST(DequantizeRowTest, Q4_1ScaleAndMin) {
  std::vector<uint8_t> bytes;
  PutU16(bytes, 0x3400);  // d = 0.25
  PutU16(bytes, 0xbc00);  // m = -1
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(j | ((j ^ 5) << 4)));
  ASSERT_EQ(bytes.size(), static_cast<size_t>(BlockBytes(DType::kQ4_1)));
  std::vector<float> out(32);
  DequantizeRow(DType::kQ4_1, bytes.data(), 32, out.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(out[j + 16], 0.25f * (j ^ 5) - 1.0f) << j;
  }
}

TEST(DequantizeRowTest, FloatTypesAnyLength) {
  // 11 elements: one full 8-wide step and a partial one.
  const uint16_t f16[11] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x8000,
                            0x4200, 0x3555, 0xfc00, 0x0400, 0x4b00};
  const float f16_want[11] = {1, -2, 0.5f, 65504, std::ldexp(1.0f, -24), -0.0f,
                              3, 0.333251953125f,
                              -std::numeric_limits<float>::infinity(),
                              std::ldexp(1.0f, -14), 14};
  std::vector<uint8_t> bytes;
  for (uint16_t h : f16) PutU16(bytes, h);
  float out[11];
  DequantizeRow(DType::kF16, bytes.data(), 11, out);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(Bits(out[i]), Bits(f16_want[i])) << i;

  const uint16_t bf16[11] = {0x3f80, 0xc000, 0x3f00, 0x4049, 0x0001, 0x8000,
                             0x7f80, 0x4040, 0xbf80, 0x3e80, 0x4120};
  bytes.clear();
  for (uint16_t h : bf16) PutU16(bytes, h);
  DequantizeRow(DType::kBF16, bytes.data(), 11, out);
  for (int i = 0; i < 11; ++i) {
    EXPECT_EQ(Bits(out[i]), static_cast<uint32_t>(bf16[i]) << 16) << i;
  }

  const float f32[11] = {1, 2, 3, 4, 5, 6, 7, 8, 9, -10, 11.5f};
  DequantizeRow(DType::kF32, f32, 11, out);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(out[i], f32[i]);
}

TEST(DequantizeRowTest, RejectsPartialBlocks) {
  uint8_t bytes[64] = {};
  float out[64];
  EXPECT_THROW(DequantizeRow(DType::kQ4_0, bytes, 31, out), std::invalid_argument);
  EXPECT_NO_THROW(DequantizeRow(DType::kQ4_0, bytes, 0, out));
}

TEST(DequantizeRowTest, KQuantsRejectPartialSuperBlocks) {
  std::vector<uint8_t> bytes(2 * 210);
  std::vector<float> out(512);
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_THROW(DequantizeRow(t, bytes.data(), 32, out.data()), std::invalid_argument);
    EXPECT_THROW(DequantizeRow(t, bytes.data(), 288, out.data()), std::invalid_argument);
    EXPECT_NO_THROW(DequantizeRow(t, bytes.data(), 256, out.data()));
    EXPECT_EQ(RowBytes(t, 100), std::nullopt);
  }
  EXPECT_EQ(RowBytes(DType::kQ2_K, 512), 168);
  EXPECT_EQ(RowBytes(DType::kQ3_K, 256), 110);
  EXPECT_EQ(RowBytes(DType::kQ4_K, 256), 144);
  EXPECT_EQ(RowBytes(DType::kQ5_K, 256), 176);
  EXPECT_EQ(RowBytes(DType::kQ6_K, 256), 210);
  EXPECT_EQ(RowBytes(DType::kQ5_0, 64), 44);
  EXPECT_EQ(RowBytes(DType::kQ5_1, 64), 48);
}

TEST(DequantizeRowTest, Q5_0HighBits) {
  // Element j's 5th bit is bit j of the little-endian u32 qh.
  std::vector<uint8_t> bytes;
  PutU16(bytes, 0x3800);  // d = 0.5
  const uint32_t qh = 0xA5C3F00Fu;
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(qh >> (8 * i)));
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> out(32);
  DequantizeRow(DType::kQ5_0, bytes.data(), 32, out.data());
  auto bit = [&](int e) { return static_cast<int>((qh >> e) & 1) << 4; };
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * ((j | bit(j)) - 16)) << j;
    EXPECT_EQ(out[j + 16], 0.5f * (((15 - j) | bit(j + 16)) - 16)) << j;
  }
}

TEST(DequantizeRowTest, Q4_KHandBuiltSuperBlock) {
  // d = 0.5, dmin = 0.25; sub-block j has scale j + 1 and min 2 * j + 1
  // (j >= 4: 6-bit values split over bytes 0-3 / 4-7 and 8-11).
  std::vector<uint8_t> b(144, 0);
  const uint16_t d = 0x3800, dmin = 0x3400;
  std::memcpy(b.data(), &d, 2);
  std::memcpy(b.data() + 2, &dmin, 2);
  uint8_t* sc = b.data() + 4;
  int scale[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    scale[j] = j < 4 ? j + 1 : 40 + j;  // >= 16 for j >= 4: uses the high bits
    mn[j] = j < 4 ? 2 * j + 1 : 50 + j;
    if (j < 4) {
      sc[j] = static_cast<uint8_t>(scale[j]);
      sc[j + 4] = static_cast<uint8_t>(mn[j]);
    } else {
      sc[j + 4] = static_cast<uint8_t>((scale[j] & 0xF) | ((mn[j] & 0xF) << 4));
      sc[j - 4] |= static_cast<uint8_t>((scale[j] >> 4) << 6);
      sc[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i * 37 + 11) & 0xff);
  std::vector<float> out(256);
  DequantizeRow(DType::kQ4_K, b.data(), 256, out.data());
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32;
    const int q = (b[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
    const float want = 0.5f * scale[j] * q - 0.25f * mn[j];  // all exact here
    ASSERT_EQ(out[e], want) << e;
  }
}

// The portable decoders (DecodeScalar, what a non-AVX2 build runs) against
// the compiled Decode (AVX2 on x86-64-v3) on random blocks: same bits.
template <DType T>
void CheckPortableDecoder(std::mt19937& rng) {
  using C = detail::Codec<T>;
  constexpr int kSub = detail::kSubSteps<T>;
  constexpr int64_t kBytes = detail::BlockBytesOf<T>();
  static_assert(kBytes == BlockBytes(T));
  static_assert(C::kStepElems * kSub == BlockElems(T));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> block(kBytes);
  for (int iter = 0; iter < 2000; ++iter) {
    for (auto& b : block) b = static_cast<uint8_t>(rng());
    // Finite scales of any magnitude and sign (random fp16 bits may be
    // NaN, whose payload is not part of the contract); sometimes zero.
    const auto [d_off, m_off] = ScaleOffsets(T);
    for (int off : {d_off, m_off}) {
      if (off < 0) continue;
      uint16_t h = static_cast<uint16_t>(rng());
      if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;
      if (iter % 17 == 0) h = 0;
      std::memcpy(block.data() + off, &h, 2);
    }
    for (int j = 0; j < kSub; ++j) {
      float want[32], got[32];
      detail::Vec v[4];
      if constexpr (kSub == 1) {
        C::DecodeScalar(block.data(), want);
        C::Decode(block.data(), v);
      } else {
        C::DecodeScalar(block.data(), j, want);
        C::Decode(block.data(), j, v);
      }
      for (int i = 0; i < 4; ++i) detail::VStore(got + 8 * i, v[i]);
      for (int e = 0; e < 32; ++e) {
        ASSERT_EQ(Bits(got[e]), Bits(want[e]))
            << DTypeName(T) << " iter " << iter << " sub " << j << " elem " << e
            << ": " << got[e] << " vs " << want[e];
      }
    }
  }
}

TEST(DequantizeRowTest, PortableDecodersMatchCompiledDecoders) {
  std::mt19937 rng(99);
  CheckPortableDecoder<DType::kQ5_0>(rng);
  CheckPortableDecoder<DType::kQ5_1>(rng);
  CheckPortableDecoder<DType::kQ2_K>(rng);
  CheckPortableDecoder<DType::kQ3_K>(rng);
  CheckPortableDecoder<DType::kQ4_K>(rng);
  CheckPortableDecoder<DType::kQ5_K>(rng);
  CheckPortableDecoder<DType::kQ6_K>(rng);
  if (!SPECLINE_KERNELS_AVX2) {
    GTEST_SKIP() << "portable build: Decode is DecodeScalar (compared with itself)";
  }
}

// ---------------------------------------------------------------------------
// MatMul against a double-precision reference over the dequantized weights.

// Random row-major weights of type t with `row_bytes` stride (>= the dense
// size; the padding is filled with junk the kernels must not read as data).
std::vector<uint8_t> RandomWeights(DType t, int64_t rows, int64_t cols,
                                   int64_t row_bytes, std::mt19937& rng) {
  std::vector<uint8_t> buf(row_bytes * rows);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.01f, 0.1f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = buf.data() + r * row_bytes;
    for (int64_t c = 0; c < cols; c += BlockElems(t)) {
      uint8_t* p = row + c / BlockElems(t) * BlockBytes(t);
      uint16_t h;
      switch (t) {
        case DType::kF32: {
          const float f = u(rng);
          std::memcpy(p, &f, 4);
          break;
        }
        case DType::kF16:
          h = F32ToF16(u(rng));
          std::memcpy(p, &h, 2);
          break;
        case DType::kBF16:
          h = F32ToBF16(u(rng));
          std::memcpy(p, &h, 2);
          break;
        default: {
          // Quant types: random quants, sane fp16 scales (a K-quant's
          // sub-block scales multiply these by up to 63 or 127).
          const auto [d_off, m_off] = ScaleOffsets(t);
          const float k = BlockElems(t) == 256 ? 0.02f : 1.0f;
          h = F32ToF16(scale(rng) * k);
          std::memcpy(p + d_off, &h, 2);
          if (m_off >= 0) {
            h = F32ToF16(t == DType::kQ4_1 || t == DType::kQ5_1 ? u(rng) * 0.5f
                                                                 : scale(rng) * k);
            std::memcpy(p + m_off, &h, 2);
          }
          break;
        }
      }
    }
  }
  return buf;
}

struct Case {
  int64_t rows, cols, m;
  int64_t pad;  // extra bytes per row
};

// Runs MatMul for one case into y and checks it against the double
// reference (y is kept for the identity checks). With quantized
// activations (QuantizedActivations()), quantized weights see x rounded to
// int8 per 32-block (per 256 for K-quants): the bound adds half a step of each block's scale
// (max|x| / 127) times |w| per element.
void CheckMatMul(DType t, const Case& c, const std::vector<uint8_t>& w,
                 const std::vector<float>& x, ThreadPool& pool, std::vector<float>& y) {
  const bool q8 = BlockElems(t) > 1 && QuantizedActivations();
  // K-quant weights meet Q8_K activations: one scale per 256 elements.
  const int64_t qblock = BlockElems(t) == 256 ? 256 : 32;
  const int64_t row_bytes = *RowBytes(t, c.cols) + c.pad;
  WeightMatrix wm{t, c.rows, c.cols, w.data(), row_bytes};
  y.assign(c.m * c.rows, std::nanf(""));
  MatMul(wm, x.data(), c.m, y.data(), pool);
  std::vector<float> row(c.cols);
  for (int64_t r = 0; r < c.rows; ++r) {
    DequantizeRow(t, w.data() + r * row_bytes, c.cols, row.data());
    for (int64_t i = 0; i < c.m; ++i) {
      double ref = 0, mag = 0, rounding = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        ref += static_cast<double>(row[k]) * x[i * c.cols + k];
        mag += std::fabs(static_cast<double>(row[k]) * x[i * c.cols + k]);
        if (q8 && k % qblock == 0) {
          double amax = 0;
          for (int64_t kk = k; kk < k + qblock; ++kk) amax = std::max(amax, std::fabs(double{x[i * c.cols + kk]}));
          for (int64_t kk = k; kk < k + qblock; ++kk) rounding += std::fabs(double{row[kk]}) * amax / 254.0;
        }
      }
      const double got = y[i * c.rows + r];
      // fp32 accumulation over cols terms: error grows with the number of
      // sequential additions per lane (cols / 8) plus the final tree.
      const double tol = 4e-7 * (c.cols / 8.0 + 4) * mag + 1.001 * rounding + 1e-30;
      ASSERT_NEAR(got, ref, tol) << DTypeName(t) << " rows=" << c.rows << " cols="
                                 << c.cols << " m=" << c.m << " r=" << r << " i=" << i;
    }
  }
}

// Both activation paths for the quantized types: int8 (the default) and fp32.
class MatMulTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { SetQuantizedActivations(GetParam()); }
  void TearDown() override { SetQuantizedActivations(true); }
};

INSTANTIATE_TEST_SUITE_P(Activations, MatMulTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Int8" : "Fp32"; });

TEST_P(MatMulTest, MatchesDoubleReferenceForEveryDType) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[] = {&pool1, &pool2, &pool3};
  for (DType t : kAllTypes) {
    const bool quant = BlockElems(t) > 1;
    std::vector<Case> cases;
    if (BlockElems(t) == 256) {
      cases = {{1, 256, 1, 0},  {5, 512, 3, 0},   {37, 256, 7, 0}, {50, 768, 1, 6},
               {29, 256, 17, 0}, {27, 1024, 5, 2}, {9, 2048, 66, 4}};
    } else if (quant) {
      cases = {{1, 32, 1, 0},  {5, 64, 3, 0},   {37, 96, 7, 0},  {50, 320, 1, 6},
               {29, 32, 17, 0}, {101, 128, 5, 2}, {70, 256, 8, 0}, {9, 2048, 66, 4}};
    } else {
      cases = {{1, 1, 1, 0},  {3, 7, 2, 0},   {5, 8, 1, 0},   {37, 13, 5, 4},
               {50, 100, 1, 0}, {29, 333, 17, 2}, {101, 64, 3, 0}, {7, 24, 9, 0}};
    }
    int which = 0;
    for (const Case& c : cases) {
      const int64_t row_bytes = *RowBytes(t, c.cols) + c.pad;
      auto w = RandomWeights(t, c.rows, c.cols, row_bytes, rng);
      std::vector<float> x(c.m * c.cols);
      for (auto& v : x) v = u(rng);
      ThreadPool& pool = *pools[which++ % 3];
      std::vector<float> y;
      CheckMatMul(t, c, w, x, pool, y);
      if (HasFatalFailure()) return;

      // Same bits for any thread count, and row i of a batched call equals
      // the m = 1 call on x row i (the canonical reduction order).
      WeightMatrix wm{t, c.rows, c.cols, w.data(), row_bytes};
      for (ThreadPool* p : pools) {
        std::vector<float> again(c.m * c.rows);
        MatMul(wm, x.data(), c.m, again.data(), *p);
        ASSERT_EQ(0, std::memcmp(again.data(), y.data(), y.size() * 4))
            << DTypeName(t) << " threads=" << p->size();
      }
      for (int64_t i = 0; i < c.m; ++i) {
        std::vector<float> single(c.rows);
        MatMul(wm, x.data() + i * c.cols, 1, single.data(), pool);
        ASSERT_EQ(0, std::memcmp(single.data(), y.data() + i * c.rows, c.rows * 4))
            << DTypeName(t) << " m=" << c.m << " row " << i;
      }
    }
  }
}

// The integer paths (int8 activations) of every quantized type, on blocks
// from a fixed generator: the hash of the outputs is the same on the
// x86-64-v3 and the portable (no -march) builds, so both compute the same
// integers and the same roundings. m = 1, 7 and 40 take the decode, the
// few-rows and the prefill loops.
TEST(MatMulGoldenTest, IntegerPathBitsOnEveryBuild) {
  SetQuantizedActivations(true);
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  uint32_t state = 12345;
  auto next = [&] {  // xorshift32
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
  };
  ThreadPool pool(2);
  for (DType t : kAllTypes) {
    if (BlockElems(t) == 1) continue;
    const int64_t rows = 37, cols = 768, row_bytes = *RowBytes(t, cols);
    std::vector<uint8_t> w(rows * row_bytes);
    for (auto& b : w) b = static_cast<uint8_t>(next());
    const auto [d_off, m_off] = ScaleOffsets(t);
    for (int64_t b = 0; b < rows * cols / BlockElems(t); ++b) {
      // fp16 scales of about 2^-7 .. 2^-6 with random mantissas.
      for (int off : {d_off, m_off}) {
        if (off < 0) continue;
        uint8_t* p = w.data() + b * BlockBytes(t) + off;
        p[0] = static_cast<uint8_t>(next());
        p[1] = static_cast<uint8_t>(0x20 + next() % 8);
      }
    }
    for (int64_t m : {1, 7, 40}) {
      std::vector<float> x(m * cols), y(m * rows);
      for (float& v : x) v = (static_cast<int>(next() % 20001) - 10000) * 1e-4f;
      MatMul({t, rows, cols, w.data(), row_bytes}, x.data(), m, y.data(), pool);
      for (float f : y) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        for (int i = 0; i < 4; ++i) hash = (hash ^ ((u >> (8 * i)) & 0xff)) * 1099511628211ull;
      }
    }
  }
  EXPECT_EQ(hash, 0xff28607e7ecee1aeull) << "got 0x" << std::hex << hash;
}

// The machine running the tests has what the build targets (else every
// pool would abort with the rebuild hint).
TEST(CpuFeaturesTest, ThisCpuRunsThisBuild) { EXPECT_EQ(MissingCpuFeatures(), ""); }

TEST(MatMulRowTest, F32RowEqualsDot) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t rows = 9, cols = 77;
  std::vector<float> w(rows * cols), x(cols), y(rows);
  for (auto& v : w) v = u(rng);
  for (auto& v : x) v = u(rng);
  ThreadPool pool(2);
  MatMul({DType::kF32, rows, cols, w.data(), cols * 4}, x.data(), 1, y.data(), pool);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(Bits(y[r]), Bits(Dot(w.data() + r * cols, x.data(), cols)));
  }
}

TEST(MatMulRowTest, RejectsMalformedWeights) {
  ThreadPool pool(1);
  float w[64] = {}, x[64] = {}, y[4];
  EXPECT_THROW(MatMul({DType::kQ8_0, 1, 33, w, 64}, x, 1, y, pool), std::invalid_argument);
  EXPECT_THROW(MatMul({DType::kF32, 2, 8, w, 16}, x, 1, y, pool), std::invalid_argument);
  EXPECT_THROW(MatMul({DType::kF32, 2, 8, nullptr, 32}, x, 1, y, pool),
               std::invalid_argument);
}

}  // namespace
}  // namespace specline::kernels
