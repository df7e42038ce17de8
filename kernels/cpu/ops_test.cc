// The CPU vector ops (Dot, Axpy, RmsNorm, SwiGlu, Softmax) against naive
// loops, and the fp16 / bf16 conversions at their edge cases.
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

float Bits(uint32_t u) { return detail::BitsToF32(u); }
uint32_t Bits(float f) { return detail::F32ToBits(f); }

std::vector<float> RandomVector(int64_t n, std::mt19937& rng, float lo = -3, float hi = 3) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

TEST(VectorOpsTest, DotAxpyAdd) {
  std::mt19937 rng(11);
  for (int64_t n : {0, 1, 7, 8, 9, 31, 100, 1000}) {
    auto a = RandomVector(n, rng), b = RandomVector(n, rng);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      ref += static_cast<double>(a[i]) * b[i];
      mag += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    EXPECT_NEAR(Dot(a.data(), b.data(), n), ref, 1e-6 * mag + 1e-30) << n;

    auto y = b;
    Axpy(0.75f, a.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], std::fma(0.75f, a[i], b[i])) << i;

    auto s = a;
    AddInPlace(s.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(s[i], a[i] + b[i]) << i;
  }
}

TEST(VectorOpsTest, RmsNorm) {
  std::mt19937 rng(12);
  for (int64_t n : {1, 5, 8, 64, 771}) {
    auto x = RandomVector(n, rng), w = RandomVector(n, rng, 0.5f, 1.5f);
    std::vector<float> out(n);
    RmsNorm(x.data(), w.data(), 1e-5f, n, out.data());
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = x[i] * inv * w[i];
      EXPECT_NEAR(out[i], ref, 1e-5 * std::fabs(ref) + 1e-7) << n << " " << i;
    }
  }
}

TEST(VectorOpsTest, SwiGlu) {
  std::mt19937 rng(13);
  auto g = RandomVector(257, rng, -20, 20), up = RandomVector(257, rng);
  g[0] = -100.0f;  // exp overflow side must give -0, not NaN
  auto out = g;
  SwiGlu(out.data(), up.data(), 257);
  for (int i = 0; i < 257; ++i) {
    const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * up[i];
    EXPECT_NEAR(out[i], ref, 1e-5 * std::fabs(ref) + 1e-30) << i;
  }
}

TEST(VectorOpsTest, Softmax) {
  std::mt19937 rng(14);
  auto x = RandomVector(1001, rng, -30, 30);
  x[5] = 1000.0f;  // large logits must not overflow
  x[6] = -std::numeric_limits<float>::infinity();  // masked entry
  auto p = x;
  Softmax(p.data(), 1001);
  double denom = 0;
  for (float v : x) denom += std::exp(static_cast<double>(v) - 1000.0);
  double total = 0;
  for (int i = 0; i < 1001; ++i) {
    const double ref = std::exp(static_cast<double>(x[i]) - 1000.0) / denom;
    EXPECT_NEAR(p[i], ref, 1e-6 * ref + 1e-37) << i;
    total += p[i];
  }
  EXPECT_EQ(p[6], 0.0f);
  EXPECT_NEAR(total, 1.0, 1e-5);

  std::vector<float> masked(4, -std::numeric_limits<float>::infinity());
  Softmax(masked.data(), 4);
  for (float v : masked) EXPECT_EQ(v, 0.25f);
}

// ---------------------------------------------------------------------------
// fp16 / bf16 conversions.

TEST(ConvertTest, F16KnownValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(F16ToF32(0x7c00), inf);
  EXPECT_EQ(F16ToF32(0xfc00), -inf);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7c01)));  // signalling payload stays NaN
  EXPECT_EQ(Bits(F16ToF32(0x8000)), 0x80000000u);

  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(-inf), 0xfc00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);       // tie -> even (0)
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);       // tie -> even (2)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);    // subnormal carries to normal
  const uint16_t nan = F32ToF16(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_NE(F32ToF16(Bits(0x7f800001u)) & 0x03ff, 0);  // low-payload NaN stays NaN
}

TEST(ConvertTest, F16AgreesWithPortableImplementation) {
  // All 2^16 halves one way; a dense stride of float bit patterns the other.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = F16ToF32(static_cast<uint16_t>(h));
    const float b = detail::F16ToF32Portable(static_cast<uint16_t>(h));
    ASSERT_EQ(Bits(a), Bits(b)) << std::hex << h;
    if (!std::isnan(a)) {
      ASSERT_EQ(F32ToF16(a), h) << std::hex << h;  // round trip
    }
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) {
    const float f = Bits(static_cast<uint32_t>(u));
    ASSERT_EQ(F32ToF16(f), detail::F32ToF16Portable(f)) << std::hex << u;
  }
}

TEST(ConvertTest, BF16) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBF16(Bits(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(F32ToBF16(Bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(F32ToBF16(Bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(F32ToBF16(Bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(F32ToBF16(Bits(0x00018000u)), 0x0002);  // subnormal tie -> even
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
  EXPECT_EQ(Bits(BF16ToF32(0x0001)), 0x00010000u);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(Bits(0x7f800001u)))));  // not inf
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::nanf("")))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = BF16ToF32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(F32ToBF16(f), h);
    }
  }
}

}  // namespace
}  // namespace specline::kernels
