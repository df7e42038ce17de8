// The elementwise and sampling kernels of kernels/cuda/ops.h against their
// CPU references (kernels/cpu/ops.h, Rope, Warp, InverseCdf, VerifyDraft),
// on random inputs with fixed seeds, for bf16 and fp16, on shapes that take
// both the vector and the scalar paths. Outputs are poisoned (0xFF bytes:
// NaN for floating types, -1 for int32) before each run, so an element a
// kernel fails to write fails the comparison. Skipped without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/ops.h"
#include "model/drafters/verify.h"
#include "model/model_config.h"
#include "model/runtime/rope.h"
#include "model/runtime/sampler.h"
#include "model/splitmix64.h"
#include "tests/cuda_test_util.h"

namespace specline {
namespace {

using cuda::DeviceBuffer;
using ::specline::testing::Download;
using ::specline::testing::FromHalfBits;
using ::specline::testing::RelativeError;
using ::specline::testing::ToHalfBits;
using ::specline::testing::Upload;

constexpr DType kTypes[] = {DType::kBF16, DType::kF16};

std::string Name(DType t) { return std::string(DTypeName(t)); }

// Relative-error bound for an output rounded to t.
double Tol(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }

// Uniform values in [lo, hi) from a fixed seed (never exactly zero in
// practice).
std::vector<float> RandomVec(size_t n, uint64_t seed, float lo, float hi) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + static_cast<float>(rng.Uniform()) * (hi - lo);
  return v;
}

// Values as t sees them (rounded to t and back).
std::vector<float> Rounded(DType t, const std::vector<float>& v) {
  return FromHalfBits(t, ToHalfBits(t, v));
}

// A device buffer of `bytes` filled with 0xFF.
DeviceBuffer Poisoned(size_t bytes) {
  DeviceBuffer d(std::max<size_t>(bytes, 1));
  SPECLINE_CUDA_CHECK(cudaMemset(d.get(), 0xFF, std::max<size_t>(bytes, 1)));
  return d;
}

// Device copies of half-type data, `pad` extra elements at the front so the
// data can start misaligned (pad = 1) and take the scalar paths.
struct HalfBuf {
  DeviceBuffer buf;
  int pad = 0;
  void* ptr() const { return static_cast<uint16_t*>(buf.get()) + pad; }
};
HalfBuf UploadHalf(DType t, const std::vector<float>& v, int pad = 0) {
  std::vector<uint16_t> bits(pad, 0xFFFF);
  const std::vector<uint16_t> data = ToHalfBits(t, v);
  bits.insert(bits.end(), data.begin(), data.end());
  return {Upload(bits), pad};
}
std::vector<float> DownloadHalf(DType t, const HalfBuf& b, size_t n) {
  std::vector<uint16_t> bits = Download<uint16_t>(b.buf, n + b.pad);
  bits.erase(bits.begin(), bits.begin() + b.pad);
  return FromHalfBits(t, bits);
}
std::vector<uint16_t> DownloadBits(const HalfBuf& b, size_t n) {
  std::vector<uint16_t> bits = Download<uint16_t>(b.buf, n + b.pad);
  bits.erase(bits.begin(), bits.begin() + b.pad);
  return bits;
}

struct FloatBuf {
  DeviceBuffer buf;
  int pad = 0;
  float* ptr() const { return static_cast<float*>(buf.get()) + pad; }
};
FloatBuf UploadF32(const std::vector<float>& v, int pad = 0) {
  std::vector<float> all(pad, 0.0f);
  all.insert(all.end(), v.begin(), v.end());
  return {Upload(all), pad};
}
std::vector<float> DownloadF32(const FloatBuf& b, size_t n) {
  std::vector<float> all = Download<float>(b.buf, n + b.pad);
  all.erase(all.begin(), all.begin() + b.pad);
  return all;
}

// Bitwise equality of float vectors (NaN never equal), with the first
// difference in the message.
::testing::AssertionResult SameFloats(const std::vector<float>& got,
                                      const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> Slice(const std::vector<float>& v, size_t begin, size_t n) {
  return std::vector<float>(v.begin() + begin, v.begin() + begin + n);
}

// ---------------------------------------------------------------- elementwise

TEST(CudaElementwise, EmbedTokens) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const int vocab = 50;
  for (DType t : kTypes) {
    for (int dim : {1, 8, 64, 999, 2048}) {
      for (int n : {1, 37}) {
        SCOPED_TRACE(Name(t) + " dim " + std::to_string(dim) + " n " + std::to_string(n));
        const std::vector<float> table = Rounded(t, RandomVec(size_t{1} * vocab * dim, 1, -2, 2));
        std::vector<int32_t> tokens(n);
        Rng rng(2);
        for (int32_t& tok : tokens) tok = static_cast<int32_t>(rng.Next() % vocab);
        HalfBuf d_table = UploadHalf(t, table);
        DeviceBuffer d_tokens = Upload(tokens);
        DeviceBuffer d_x = Poisoned(sizeof(float) * n * dim);
        cuda::EmbedTokens(t, d_table.ptr(), d_tokens.as<int32_t>(), n, dim, d_x.as<float>(),
                          nullptr);
        const std::vector<float> x = Download<float>(d_x, size_t{1} * n * dim);
        std::vector<float> want;
        for (int32_t tok : tokens) {
          want.insert(want.end(), table.begin() + int64_t{tok} * dim,
                      table.begin() + int64_t{tok + 1} * dim);
        }
        EXPECT_TRUE(SameFloats(x, want));
      }
    }
  }
}

TEST(CudaElementwise, AddRmsNorm) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const float eps = 1e-5f;
  struct Case {
    int dim, n, pad;
    bool delta;
  };
  const Case cases[] = {{1, 1, 0, true},     {8, 37, 0, true},    {37, 37, 0, true},
                        {999, 3, 0, true},   {2048, 1, 0, true},  {2048, 37, 0, false},
                        {4096, 2, 0, true},  {2048, 3, 1, true},  {64, 37, 1, false}};
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + " dim " + std::to_string(c.dim) + " n " + std::to_string(c.n) +
                   " pad " + std::to_string(c.pad) + (c.delta ? " delta" : " no delta"));
      const size_t count = size_t{1} * c.n * c.dim;
      const std::vector<float> x = RandomVec(count, 3, -2, 2);
      const std::vector<float> delta = Rounded(t, RandomVec(count, 4, -1, 1));
      const std::vector<float> weight = RandomVec(c.dim, 5, 0.5f, 1.5f);
      FloatBuf d_x = UploadF32(x, c.pad);
      HalfBuf d_delta = UploadHalf(t, delta, c.pad);
      FloatBuf d_w = UploadF32(weight, c.pad);
      HalfBuf d_out{Poisoned(2 * (count + c.pad)), c.pad};
      cuda::AddRmsNorm(t, d_x.ptr(), c.delta ? d_delta.ptr() : nullptr, d_w.ptr(), eps, c.n,
                       c.dim, d_out.ptr(), nullptr);
      const std::vector<float> got_x = DownloadF32(d_x, count);
      const std::vector<float> got = DownloadHalf(t, d_out, count);
      std::vector<float> want_x = x;
      if (c.delta) {
        for (size_t i = 0; i < count; ++i) want_x[i] += delta[i];
      }
      EXPECT_TRUE(SameFloats(got_x, want_x));
      std::vector<float> want(count);
      for (int r = 0; r < c.n; ++r) {
        kernels::RmsNorm(want_x.data() + int64_t{r} * c.dim, weight.data(), eps, c.dim,
                         want.data() + int64_t{r} * c.dim);
        EXPECT_LT(RelativeError(Slice(got, size_t{1} * r * c.dim, c.dim),
                                Slice(want, size_t{1} * r * c.dim, c.dim)),
                  Tol(t))
            << "row " << r;
      }
    }
  }
}

TEST(CudaElementwise, AddResidual) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (DType t : kTypes) {
    for (int64_t count : {1, 7, 8, 1000, 4099, 65536}) {
      for (int pad : {0, 1}) {
        SCOPED_TRACE(Name(t) + " count " + std::to_string(count) + " pad " + std::to_string(pad));
        const std::vector<float> x = RandomVec(count, 6, -3, 3);
        const std::vector<float> delta = Rounded(t, RandomVec(count, 7, -1, 1));
        FloatBuf d_x = UploadF32(x, pad);
        HalfBuf d_delta = UploadHalf(t, delta, pad);
        cuda::AddResidual(t, d_x.ptr(), d_delta.ptr(), count, nullptr);
        std::vector<float> want = x;
        for (int64_t i = 0; i < count; ++i) want[i] += delta[i];
        EXPECT_TRUE(SameFloats(DownloadF32(d_x, count), want));
      }
    }
  }
}

TEST(CudaElementwise, AddBias) {
  SPECLINE_SKIP_WITHOUT_GPU();
  struct Case {
    int n_rows, width, stride, pad;
  };
  const Case cases[] = {{1, 8, 8, 0},      {37, 64, 64 + 16, 0}, {37, 37, 40, 0},
                        {3, 1032, 1040, 0}, {5, 64, 67, 0},      {4, 64, 72, 1}};
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + " rows " + std::to_string(c.n_rows) + " width " +
                   std::to_string(c.width) + " stride " + std::to_string(c.stride));
      const size_t count = size_t{1} * c.n_rows * c.stride;
      const std::vector<float> rows = Rounded(t, RandomVec(count, 8, -2, 2));
      const std::vector<float> bias = RandomVec(c.width, 9, -1, 1);
      HalfBuf d_rows = UploadHalf(t, rows, c.pad);
      FloatBuf d_bias = UploadF32(bias, c.pad);
      cuda::AddBias(t, d_rows.ptr(), d_bias.ptr(), c.n_rows, c.width, c.stride, nullptr);
      std::vector<float> want = rows;
      for (int r = 0; r < c.n_rows; ++r) {
        for (int j = 0; j < c.width; ++j) {
          float& v = want[size_t{1} * r * c.stride + j];
          v = v + bias[j];
        }
      }
      // One fp32 add and one rounding, as on the host: bit-exact.
      EXPECT_TRUE(SameFloats(DownloadHalf(t, d_rows, count), Rounded(t, want)));
    }
  }
}

TEST(CudaElementwise, HeadRmsNorm) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const float eps = 1e-6f;
  struct Case {
    int n_rows, heads, head_dim, offset, extra;  // rows start `offset` elements into qkv
  };
  const Case cases[] = {{1, 1, 8, 0, 0},     {37, 3, 64, 0, 128}, {37, 2, 128, 256, 0},
                        {5, 4, 36, 0, 72},   {3, 2, 64, 1, 1},    {1, 16, 128, 2048, 1024},
                        {2, 3, 256, 0, 0}};
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + " rows " + std::to_string(c.n_rows) + " heads " +
                   std::to_string(c.heads) + " head_dim " + std::to_string(c.head_dim) +
                   " offset " + std::to_string(c.offset));
      const int stride = c.offset + c.heads * c.head_dim + c.extra;
      const size_t count = size_t{1} * c.n_rows * stride;
      const std::vector<float> qkv = Rounded(t, RandomVec(count, 10, -3, 3));
      const std::vector<float> weight = RandomVec(c.head_dim, 11, 0.5f, 1.5f);
      HalfBuf d_qkv = UploadHalf(t, qkv);
      FloatBuf d_w = UploadF32(weight);
      cuda::HeadRmsNorm(t, static_cast<uint16_t*>(d_qkv.ptr()) + c.offset, d_w.ptr(), eps,
                        c.n_rows, c.heads, c.head_dim, stride, nullptr);
      const std::vector<float> got = DownloadHalf(t, d_qkv, count);
      std::vector<float> want = qkv;
      for (int r = 0; r < c.n_rows; ++r) {
        for (int h = 0; h < c.heads; ++h) {
          const size_t at = size_t{1} * r * stride + c.offset + size_t{1} * h * c.head_dim;
          kernels::RmsNorm(qkv.data() + at, weight.data(), eps, c.head_dim, want.data() + at);
          EXPECT_LT(RelativeError(Slice(got, at, c.head_dim), Slice(want, at, c.head_dim)),
                    Tol(t))
              << "row " << r << " head " << h;
        }
        // Everything outside the heads is untouched.
        for (int j = 0; j < stride; ++j) {
          if (j >= c.offset && j < c.offset + c.heads * c.head_dim) continue;
          const size_t at = size_t{1} * r * stride + j;
          ASSERT_EQ(got[at], qkv[at]) << "row " << r << " column " << j;
        }
      }
    }
  }
}

TEST(CudaElementwise, ApplyRope) {
  SPECLINE_SKIP_WITHOUT_GPU();
  struct Case {
    int n_rows, heads, head_dim, offset, extra, rot;  // rot: partial rotary dims (0: all)
  };
  const Case cases[] = {{1, 1, 8, 0, 0, 0},     {37, 4, 64, 0, 128, 0}, {37, 2, 128, 256, 0, 0},
                        {3, 3, 64, 1, 1, 0},    {1, 32, 128, 0, 1024, 0},
                        {5, 3, 32, 0, 64, 24},  {9, 4, 128, 1, 0, 96}};
  for (DType t : kTypes) {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      for (const Case& c : cases) {
        const bool interleaved = style == RopeStyle::kInterleaved;
        SCOPED_TRACE(Name(t) + (interleaved ? " interleaved" : " half") + " rows " +
                     std::to_string(c.n_rows) + " heads " + std::to_string(c.heads) +
                     " head_dim " + std::to_string(c.head_dim) + " rot " + std::to_string(c.rot));
        ModelConfig config;
        config.head_dim = c.head_dim;
        config.rope_dim = c.rot;
        config.rope_style = style;
        config.rope_theta = 500000.0f;
        const Rope rope(config);
        const int half = c.head_dim / 2;
        std::vector<float> cos(size_t{1} * c.n_rows * half), sin(cos.size());
        Rng rng(12);
        for (int r = 0; r < c.n_rows; ++r) {
          rope.Angles(static_cast<int32_t>(rng.Next() % 4096), cos.data() + size_t{1} * r * half,
                      sin.data() + size_t{1} * r * half);
        }
        const int stride = c.offset + c.heads * c.head_dim + c.extra;
        const size_t count = size_t{1} * c.n_rows * stride;
        const std::vector<float> qkv = Rounded(t, RandomVec(count, 13, -2, 2));
        HalfBuf d_qkv = UploadHalf(t, qkv);
        FloatBuf d_cos = UploadF32(cos), d_sin = UploadF32(sin);
        cuda::ApplyRope(t, static_cast<uint16_t*>(d_qkv.ptr()) + c.offset, c.n_rows, c.heads,
                        c.head_dim, stride, d_cos.ptr(), d_sin.ptr(), interleaved, nullptr, c.rot);
        const std::vector<float> got = DownloadHalf(t, d_qkv, count);
        std::vector<float> want = qkv;
        for (int r = 0; r < c.n_rows; ++r) {
          const size_t at = size_t{1} * r * stride + c.offset;
          rope.Apply(want.data() + at, c.heads, cos.data() + size_t{1} * r * half,
                     sin.data() + size_t{1} * r * half);
          const size_t n_head = size_t{1} * c.heads * c.head_dim;
          EXPECT_LT(RelativeError(Slice(got, at, n_head), Slice(want, at, n_head)), Tol(t))
              << "row " << r;
          for (int j = 0; j < stride; ++j) {
            if (j >= c.offset && j < c.offset + c.heads * c.head_dim) continue;
            ASSERT_EQ(got[size_t{1} * r * stride + j], qkv[size_t{1} * r * stride + j])
                << "row " << r << " column " << j;
          }
        }
      }
    }
  }
}

TEST(CudaElementwise, SwiGlu) {
  SPECLINE_SKIP_WITHOUT_GPU();
  struct Case {
    int n, h, pad;
  };
  const Case cases[] = {{1, 8, 0}, {37, 37, 0}, {37, 1024, 0}, {2, 2816, 0}, {3, 64, 1}};
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + " n " + std::to_string(c.n) + " h " + std::to_string(c.h) +
                   " pad " + std::to_string(c.pad));
      const size_t count = size_t{1} * c.n * c.h;
      const std::vector<float> gate_up = Rounded(t, RandomVec(2 * count, 14, -6, 6));
      HalfBuf d_in = UploadHalf(t, gate_up, c.pad);
      HalfBuf d_out{Poisoned(2 * (count + c.pad)), c.pad};
      cuda::SwiGlu(t, d_in.ptr(), c.n, c.h, d_out.ptr(), nullptr);
      const std::vector<float> got = DownloadHalf(t, d_out, count);
      for (int i = 0; i < c.n; ++i) {
        std::vector<float> gate = Slice(gate_up, size_t{2} * i * c.h, c.h);
        const std::vector<float> up = Slice(gate_up, size_t{2} * i * c.h + c.h, c.h);
        kernels::SwiGlu(gate.data(), up.data(), c.h);
        EXPECT_LT(RelativeError(Slice(got, size_t{1} * i * c.h, c.h), gate), Tol(t))
            << "row " << i;
      }
    }
  }
}

TEST(CudaElementwise, WriteKv) {
  SPECLINE_SKIP_WITHOUT_GPU();
  struct Case {
    int n, q_elems, kv_elems, extra;
  };
  const Case cases[] = {{1, 8, 8, 0}, {37, 256, 128, 0}, {37, 36, 36, 4}, {5, 64, 64, 3}};
  const int block_size = 16, num_blocks = 8, cache_rows = block_size * num_blocks;
  for (DType t : kTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(Name(t) + " n " + std::to_string(c.n) + " kv_elems " +
                   std::to_string(c.kv_elems));
      const int stride = c.q_elems + 2 * c.kv_elems + c.extra;
      const std::vector<uint16_t> qkv =
          ToHalfBits(t, RandomVec(size_t{1} * c.n * stride, 15, -4, 4));
      // Distinct physical rows: block b, position p -> b * block_size + p % block_size.
      std::vector<int32_t> all(cache_rows);
      std::iota(all.begin(), all.end(), 0);
      Rng rng(16);
      for (int i = cache_rows - 1; i > 0; --i) std::swap(all[i], all[rng.Next() % (i + 1)]);
      const std::vector<int32_t> slots(all.begin(), all.begin() + c.n);
      DeviceBuffer d_qkv = Upload(qkv), d_slots = Upload(slots);
      const size_t cache_elems = size_t{1} * cache_rows * c.kv_elems;
      DeviceBuffer d_k = Poisoned(2 * cache_elems), d_v = Poisoned(2 * cache_elems);
      cuda::WriteKv(t, d_qkv.get(), c.n, stride, c.q_elems, c.q_elems + c.kv_elems, c.kv_elems,
                    d_slots.as<int32_t>(), d_k.get(), d_v.get(), nullptr);
      const std::vector<uint16_t> k = Download<uint16_t>(d_k, cache_elems);
      const std::vector<uint16_t> v = Download<uint16_t>(d_v, cache_elems);
      std::vector<uint16_t> want_k(cache_elems, 0xFFFF), want_v(cache_elems, 0xFFFF);
      for (int i = 0; i < c.n; ++i) {
        for (int j = 0; j < c.kv_elems; ++j) {
          want_k[size_t{1} * slots[i] * c.kv_elems + j] =
              qkv[size_t{1} * i * stride + c.q_elems + j];
          want_v[size_t{1} * slots[i] * c.kv_elems + j] =
              qkv[size_t{1} * i * stride + c.q_elems + c.kv_elems + j];
        }
      }
      EXPECT_EQ(k, want_k);
      EXPECT_EQ(v, want_v);
    }
  }
}

TEST(CudaElementwise, Conversions) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (DType t : kTypes) {
    for (int64_t count : {1, 7, 8, 1001, 65539}) {
      for (int pad : {0, 1}) {
        SCOPED_TRACE(Name(t) + " count " + std::to_string(count) + " pad " + std::to_string(pad));
        std::vector<float> values = RandomVec(count, 17, -1000, 1000);
        // Small, tie-prone and out-of-range values too.
        const float specials[] = {1e-7f, -3e-5f, 0.5f, 1.00048828125f, 65504.0f, 70000.0f,
                                  -1e30f};
        for (size_t i = 0; i < std::size(specials) && i < values.size(); ++i) {
          values[(i * 7919) % values.size()] = specials[i];
        }
        // FromFloat: the host's round-to-nearest-even, bit for bit.
        FloatBuf d_in = UploadF32(values, pad);
        HalfBuf d_half{Poisoned(2 * (count + pad)), pad};
        cuda::FromFloat(t, d_in.ptr(), count, d_half.ptr(), nullptr);
        EXPECT_EQ(DownloadBits(d_half, count), ToHalfBits(t, values));
        // ToFloat: exact.
        const std::vector<float> rounded = Rounded(t, values);
        HalfBuf d_src = UploadHalf(t, rounded, pad);
        FloatBuf d_out{Poisoned(4 * (count + pad)), pad};
        cuda::ToFloat(t, d_src.ptr(), count, d_out.ptr(), nullptr);
        EXPECT_TRUE(SameFloats(DownloadF32(d_out, count), rounded));
      }
    }
  }
}

// Element i is the (i+1)-th SplitMix64 output from `seed`, 24 bits in [0, 1).
float SplitMixUniform(uint64_t& state) {
  return static_cast<float>(SplitMix64(state) >> 40) * (1.0f / 16777216.0f);
}

TEST(CudaElementwise, FillUniform) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (int64_t count : {1, 1000, 4099, 300001}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {
      SCOPED_TRACE("count " + std::to_string(count) + " seed " + std::to_string(seed));
      const float scale = 0.02f;
      const float lo = -0.5f, hi = 1.5f;
      std::vector<float> want_half(count), want_f32(count);
      uint64_t state = seed;
      for (int64_t i = 0; i < count; ++i) {
        const float u = SplitMixUniform(state);
        want_half[i] = (2.0f * u - 1.0f) * scale;
        want_f32[i] = std::fma(u, hi - lo, lo);
      }
      for (DType t : kTypes) {
        DeviceBuffer d = Poisoned(2 * count);
        cuda::FillUniform(t, d.get(), count, seed, scale, nullptr);
        EXPECT_EQ(Download<uint16_t>(d, count), ToHalfBits(t, want_half)) << Name(t);
      }
      DeviceBuffer d = Poisoned(4 * count);
      cuda::FillUniformF32(d.as<float>(), count, seed, lo, hi, nullptr);
      const std::vector<float> got = Download<float>(d, count);
      EXPECT_TRUE(SameFloats(got, want_f32));
      for (float v : got) {
        ASSERT_TRUE(v >= lo && v <= hi) << v;
      }
    }
  }
}

TEST(CudaElementwise, ZeroSizesLaunchNothing) {
  SPECLINE_SKIP_WITHOUT_GPU();
  // Null pointers everywhere: a launch would fault.
  for (DType t : kTypes) {
    cuda::EmbedTokens(t, nullptr, nullptr, 0, 64, nullptr, nullptr);
    cuda::AddRmsNorm(t, nullptr, nullptr, nullptr, 1e-5f, 0, 64, nullptr, nullptr);
    cuda::AddResidual(t, nullptr, nullptr, 0, nullptr);
    cuda::AddBias(t, nullptr, nullptr, 0, 64, 64, nullptr);
    cuda::HeadRmsNorm(t, nullptr, nullptr, 1e-5f, 0, 2, 64, 128, nullptr);
    cuda::ApplyRope(t, nullptr, 0, 2, 64, 128, nullptr, nullptr, false, nullptr);
    cuda::SwiGlu(t, nullptr, 0, 64, nullptr, nullptr);
    cuda::WriteKv(t, nullptr, 0, 64, 0, 32, 32, nullptr, nullptr, nullptr, nullptr);
    cuda::ToFloat(t, nullptr, 0, nullptr, nullptr);
    cuda::FromFloat(t, nullptr, 0, nullptr, nullptr);
    cuda::FillUniform(t, nullptr, 0, 1, 1.0f, nullptr);
  }
  cuda::FillUniformF32(nullptr, 0, 1, 0.0f, 1.0f, nullptr);
  cuda::ArgmaxRows(nullptr, 0, 100, nullptr, nullptr);
  cuda::ApplyRepetitionPenalty(nullptr, nullptr, 0, 1.2f, nullptr);
  cuda::WarpRows(nullptr, 0, 100, nullptr, nullptr, nullptr, nullptr);
  cuda::SampleFromProbs(nullptr, 0, 100, nullptr, nullptr, nullptr);
  cuda::VerifyDrafts(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 100, nullptr, nullptr,
                     nullptr);
  SPECLINE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_THROW(cuda::ToFloat(DType::kF32, nullptr, 4, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::SwiGlu(DType::kQ8_0, nullptr, 1, 32, nullptr, nullptr),
               std::invalid_argument);
}

// ------------------------------------------------------------------- sampling

TEST(CudaSampling, ArgmaxRows) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (int vocab : {1, 5, 1000, 50001, 152064}) {
    for (int n : {1, 37}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " n " + std::to_string(n));
      std::vector<float> logits = RandomVec(size_t{1} * n * vocab, 18, -10, 10);
      Rng rng(19);
      for (int r = 0; r < n; ++r) {
        float* row = logits.data() + size_t{1} * r * vocab;
        const int m = static_cast<int>(std::max_element(row, row + vocab) - row);
        if (r % 3 == 1) row[rng.Next() % vocab] = row[m];  // a tie, before or after
        if (r % 3 == 2) {                                   // many ties at the top
          for (int k = 0; k < 5; ++k) row[rng.Next() % vocab] = 11.0f;
        }
        if (r == 5) std::fill(row, row + vocab, -INFINITY);
      }
      DeviceBuffer d_logits = Upload(logits);
      DeviceBuffer d_out = Poisoned(4 * n);
      cuda::ArgmaxRows(d_logits.as<float>(), n, vocab, d_out.as<int32_t>(), nullptr);
      const std::vector<int32_t> got = Download<int32_t>(d_out, n);
      for (int r = 0; r < n; ++r) {
        const float* row = logits.data() + size_t{1} * r * vocab;
        EXPECT_EQ(got[r], std::max_element(row, row + vocab) - row) << "row " << r;
      }
    }
  }
}

TEST(CudaSampling, ApplyRepetitionPenalty) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const int vocab = 1000;
  for (float penalty : {1.3f, 0.8f, 1.0f}) {
    for (int count : {0, 1, 50, 700}) {
      const std::vector<float> logits = RandomVec(vocab, 20, -5, 5);
      std::vector<int32_t> ids(vocab);
      std::iota(ids.begin(), ids.end(), 0);
      Rng rng(21);
      for (int i = vocab - 1; i > 0; --i) std::swap(ids[i], ids[rng.Next() % (i + 1)]);
      ids.resize(count);
      DeviceBuffer d_logits = Upload(logits), d_ids = Upload(ids);
      cuda::ApplyRepetitionPenalty(d_logits.as<float>(), d_ids.as<int32_t>(), count, penalty,
                                   nullptr);
      std::vector<float> want = logits;
      ApplyRepetitionPenalty(want, penalty, ids);
      EXPECT_TRUE(SameFloats(Download<float>(d_logits, vocab), want))
          << "penalty " << penalty << " count " << count;
    }
  }
}

// Nudges top_p / min_p until no cumulative mass (top-p) or relative
// probability (min-p) of Warp's candidates lies within rounding of them:
// the device computes exp in fp32 (relative error ~1e-7), the CPU in double.
void NudgeAwayFromEdges(const float* z, int vocab, SamplingParams& params) {
  if (params.greedy()) return;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  if (params.top_k > 0 && params.top_k < vocab) order.resize(params.top_k);
  std::vector<double> e(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    sum += e[i] = std::exp((double{z[order[i]]} - z[order[0]]) / params.temperature);
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool near = false;
    if (params.top_p < 1.0f) {
      double cum = 0;
      for (double v : e) {
        cum += v / sum;
        if (std::fabs(cum - params.top_p) < 1e-5) near = true;
      }
    }
    if (params.min_p > 0.0f) {
      for (double v : e) {
        if (std::fabs(v - params.min_p) < 1e-5 * params.min_p) near = true;
      }
    }
    if (!near) return;
    if (params.top_p < 1.0f) params.top_p *= 0.9993f;
    if (params.min_p > 0.0f) params.min_p *= 1.0007f;
  }
}

struct WarpCase {
  int vocab;
  int n;
  bool ties;  // logits on a coarse grid: many exact ties at every cut
};

TEST(CudaSampling, WarpRowsMatchesCpuWarp) {
  SPECLINE_SKIP_WITHOUT_GPU();
  // Per-row parameters cycle through this table.
  const SamplingParams table[] = {
      {.temperature = 0.0f},
      {.temperature = 1.0f},
      {.temperature = 0.7f, .top_k = 20},
      {.temperature = 1.0f, .top_k = 1},
      {.temperature = 1.3f, .top_k = 2},
      {.temperature = 0.9f, .top_p = 0.9f},
      {.temperature = 1.0f, .top_p = 0.5f},
      {.temperature = 1.0f, .top_p = 0.999f},
      {.temperature = 0.5f, .top_p = 0.01f},
      {.temperature = 1.0f, .min_p = 0.05f},
      {.temperature = 2.0f, .min_p = 0.3f},
      {.temperature = 0.8f, .top_k = 50, .top_p = 0.8f, .min_p = 0.02f},
      {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f},
      {.temperature = 1.0f, .top_k = 1000000},
      {.temperature = 1.1f, .top_k = 200, .min_p = 0.1f},
  };
  const int n_table = static_cast<int>(std::size(table));
  const WarpCase cases[] = {{1, 3, false},   {37, 37, false},   {37, 37, true},
                            {1000, 37, false}, {1000, 37, true}, {32000, 15, false},
                            {32000, 15, true}, {152064, 15, false}, {152064, 15, true}};
  for (const WarpCase& c : cases) {
    SCOPED_TRACE("vocab " + std::to_string(c.vocab) + (c.ties ? " ties" : ""));
    std::vector<float> logits = RandomVec(size_t{1} * c.n * c.vocab, 22 + c.vocab, -6, 6);
    if (c.ties) {
      for (float& v : logits) v = std::round(v * 2.0f) / 2.0f;  // 25 distinct values
    }
    std::vector<SamplingParams> params(c.n);
    std::vector<cuda::DeviceSamplingParams> dparams(c.n);
    for (int r = 0; r < c.n; ++r) {
      params[r] = table[r % n_table];
      NudgeAwayFromEdges(logits.data() + size_t{1} * r * c.vocab, c.vocab, params[r]);
      dparams[r] = {params[r].temperature, params[r].top_k, params[r].top_p, params[r].min_p};
    }
    DeviceBuffer d_logits = Upload(logits), d_params = Upload(dparams);
    DeviceBuffer d_probs = Poisoned(sizeof(float) * c.n * c.vocab);
    DeviceBuffer d_ws(std::max<size_t>(cuda::WarpWorkspaceBytes(c.n, c.vocab), 1));
    cuda::WarpRows(d_logits.as<float>(), c.n, c.vocab, d_params.as<cuda::DeviceSamplingParams>(),
                   d_probs.as<float>(), d_ws.get(), nullptr);
    const std::vector<float> probs = Download<float>(d_probs, size_t{1} * c.n * c.vocab);
    for (int r = 0; r < c.n; ++r) {
      const SamplingParams& p = params[r];
      SCOPED_TRACE("row " + std::to_string(r) + " T " + std::to_string(p.temperature) + " k " +
                   std::to_string(p.top_k) + " p " + std::to_string(p.top_p) + " min_p " +
                   std::to_string(p.min_p));
      const std::span<const float> row(logits.data() + size_t{1} * r * c.vocab, c.vocab);
      const TokenDistribution d = Warp(row, p, {});
      std::vector<float> want(c.vocab, 0.0f);
      for (size_t i = 0; i < d.ids.size(); ++i) want[d.ids[i]] = d.probs[i];
      std::vector<char> kept(c.vocab, 0);
      for (int32_t id : d.ids) kept[id] = 1;
      const float* got = probs.data() + size_t{1} * r * c.vocab;
      int mismatches = 0;
      double total = 0;
      for (int i = 0; i < c.vocab; ++i) {
        total += got[i];
        const bool ok = std::isfinite(got[i]) && (got[i] > 0.0f) == (kept[i] != 0) &&
                        std::fabs(got[i] - want[i]) <= 1e-5f;
        if (!ok && mismatches++ < 5) {
          ADD_FAILURE() << "token " << i << " logit " << row[i] << ": got " << got[i]
                        << ", want " << want[i] << (kept[i] ? " (kept)" : " (dropped)")
                        << "; CPU keeps " << d.ids.size() << " tokens";
        }
      }
      EXPECT_EQ(mismatches, 0);
      EXPECT_NEAR(total, 1.0, 1e-4);
    }
  }
}

// A dense row as the CPU's TokenDistribution (positive entries, ascending).
TokenDistribution FromDense(const float* p, int vocab) {
  TokenDistribution d;
  for (int i = 0; i < vocab; ++i) {
    if (p[i] > 0.0f) {
      d.ids.push_back(i);
      d.probs.push_back(p[i]);
    }
  }
  return d;
}

// Distance from u to the nearest CDF bin edge of d (summed as InverseCdf).
double EdgeDistance(const TokenDistribution& d, double u) {
  double cdf = 0.0, best = std::fabs(u);
  for (float p : d.probs) {
    cdf += p;
    best = std::min(best, std::fabs(u - cdf));
  }
  return best;
}

// A random distribution over vocab with about `zero_frac` exact zeros.
std::vector<float> RandomDist(int vocab, Rng& rng, double zero_frac) {
  std::vector<float> p(vocab);
  double sum = 0;
  for (float& v : p) {
    const double x = rng.Uniform();
    v = rng.Uniform() < zero_frac ? 0.0f : static_cast<float>(x * x * x + 1e-3);
    sum += v;
  }
  if (sum == 0) {
    p[rng.Next() % vocab] = 1.0f;
    sum = 1;
  }
  for (float& v : p) v = static_cast<float>(v / sum);
  return p;
}

// A uniform in [0, 1) away from every bin edge of d: 1e-4, or a hundredth
// of the mean bin width for large supports (float/double rounding moves an
// edge by ~1e-12 at most).
float SafeUniform(const TokenDistribution& d, Rng& rng) {
  const double margin = std::min(1e-4, 1e-2 / static_cast<double>(d.ids.size()));
  for (;;) {
    const float u = static_cast<float>(rng.Uniform());
    if (u < 1.0f && EdgeDistance(d, u) >= margin) return u;
  }
}

TEST(CudaSampling, SampleFromProbsMatchesInverseCdf) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (int vocab : {1, 10, 1000, 152064}) {
    const int n = 37;
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    Rng rng(23 + vocab);
    std::vector<float> probs;
    std::vector<float> uniforms(n);
    for (int r = 0; r < n; ++r) {
      std::vector<float> p = RandomDist(vocab, rng, r % 2 ? 0.5 : 0.0);
      if (r == 3) {  // all mass on one token
        std::fill(p.begin(), p.end(), 0.0f);
        p[vocab / 2] = 1.0f;
      }
      if (r == 4) {  // total a hair under u: the last positive bin
        for (float& v : p) v *= 0.999f;
      }
      const TokenDistribution d = FromDense(p.data(), vocab);
      uniforms[r] = r == 4 ? 0.9995f : SafeUniform(d, rng);
      probs.insert(probs.end(), p.begin(), p.end());
    }
    DeviceBuffer d_probs = Upload(probs), d_u = Upload(uniforms);
    DeviceBuffer d_out = Poisoned(4 * n);
    cuda::SampleFromProbs(d_probs.as<float>(), n, vocab, d_u.as<float>(), d_out.as<int32_t>(),
                          nullptr);
    const std::vector<int32_t> got = Download<int32_t>(d_out, n);
    for (int r = 0; r < n; ++r) {
      const TokenDistribution d = FromDense(probs.data() + size_t{1} * r * vocab, vocab);
      EXPECT_EQ(got[r], d.InverseCdf(uniforms[r])) << "row " << r << " u " << uniforms[r];
    }
  }
}

// The CPU's VerifyDraft with explicit uniforms (it draws them from an Rng).
VerifyResult CpuVerify(const TokenDistribution& p, const TokenDistribution& q, int32_t x,
                       double u_accept, double u_residual) {
  if (u_accept < AcceptProbability(p, q, x)) return {true, x};
  return {false, ResidualDistribution(p, q).InverseCdf(u_residual)};
}

// VerifyDrafts on the device with poisoned outputs: (tokens, accepted).
std::pair<std::vector<int32_t>, std::vector<int32_t>> RunVerifyDrafts(
    const std::vector<float>& p, const std::vector<float>* q, const std::vector<int32_t>& draft,
    const std::vector<float>& ua, const std::vector<float>& ur, int n, int vocab) {
  DeviceBuffer d_p = Upload(p), d_q = Upload(q ? *q : std::vector<float>{}),
               d_draft = Upload(draft);
  DeviceBuffer d_ua = Upload(ua), d_ur = Upload(ur);
  DeviceBuffer d_tok = Poisoned(4 * n), d_acc = Poisoned(4 * n);
  cuda::VerifyDrafts(d_p.as<float>(), q ? d_q.as<float>() : nullptr, d_draft.as<int32_t>(),
                     d_ua.as<float>(), d_ur.as<float>(), n, vocab, d_tok.as<int32_t>(),
                     d_acc.as<int32_t>(), nullptr);
  return {Download<int32_t>(d_tok, n), Download<int32_t>(d_acc, n)};
}

TEST(CudaSampling, VerifyDraftsMatchesCpu) {
  SPECLINE_SKIP_WITHOUT_GPU();
  for (int vocab : {1, 10, 1000, 50000}) {
    for (bool point_mass : {false, true}) {
      const int n = 37;
      SCOPED_TRACE("vocab " + std::to_string(vocab) + (point_mass ? " point-mass q" : " q"));
      Rng rng(24 + vocab + point_mass);
      std::vector<float> p_all, q_all, ua(n), ur(n);
      std::vector<int32_t> draft(n);
      std::vector<TokenDistribution> P(n), Q(n);
      for (int r = 0; r < n; ++r) {
        std::vector<float> p = RandomDist(vocab, rng, r % 3 == 0 ? 0.4 : 0.0);
        std::vector<float> q = RandomDist(vocab, rng, r % 2 ? 0.3 : 0.0);
        if (r == 7) q = p;  // p == q: always accepted
        P[r] = FromDense(p.data(), vocab);
        if (point_mass) {
          draft[r] = static_cast<int32_t>(rng.Next() % vocab);  // p(x) may be 0
          Q[r] = TokenDistribution{{draft[r]}, {1.0f}};
        } else {
          Q[r] = FromDense(q.data(), vocab);
          draft[r] = Q[r].InverseCdf(rng.Uniform());  // q(x) > 0
        }
        // Keep u_accept away from a and u_residual from the residual's edges.
        const double a = AcceptProbability(P[r], Q[r], draft[r]);
        do {
          ua[r] = static_cast<float>(rng.Uniform());
        } while (std::fabs(ua[r] - a) < 1e-4);
        ur[r] = SafeUniform(ResidualDistribution(P[r], Q[r]), rng);
        p_all.insert(p_all.end(), p.begin(), p.end());
        q_all.insert(q_all.end(), q.begin(), q.end());
      }
      const auto [tok, acc] = RunVerifyDrafts(p_all, point_mass ? nullptr : &q_all, draft, ua, ur,
                                               n, vocab);
      int rejected = 0;
      for (int r = 0; r < n; ++r) {
        const VerifyResult want = CpuVerify(P[r], Q[r], draft[r], ua[r], ur[r]);
        EXPECT_EQ(acc[r], want.accepted ? 1 : 0) << "row " << r;
        EXPECT_EQ(tok[r], want.token) << "row " << r;
        rejected += !want.accepted;
      }
      if (vocab > 1) {
        EXPECT_GT(rejected, 0);  // the residual path ran
      }
    }
  }
}

// The emitted tokens are distributed as p whatever q is (rejection
// sampling is lossless): a chi-square test over 20k verifications.
TEST(CudaSampling, VerifyDraftsIsLossless) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const int vocab = 8, n = 20000;
  const std::vector<float> p = {0.30f, 0.05f, 0.0f, 0.20f, 0.10f, 0.15f, 0.12f, 0.08f};
  const std::vector<float> q = {0.05f, 0.30f, 0.10f, 0.20f, 0.25f, 0.0f, 0.02f, 0.08f};
  const TokenDistribution Q = FromDense(q.data(), vocab);
  for (bool point_mass : {false, true}) {
    SCOPED_TRACE(point_mass ? "point-mass drafts" : "drafts from q");
    Rng rng(25 + point_mass);
    std::vector<float> p_all, q_all, ua(n), ur(n);
    std::vector<int32_t> draft(n);
    for (int r = 0; r < n; ++r) {
      p_all.insert(p_all.end(), p.begin(), p.end());
      q_all.insert(q_all.end(), q.begin(), q.end());
      // Point-mass drafts: any rule independent of the uniforms.
      draft[r] = point_mass ? static_cast<int32_t>(r % vocab) : Q.InverseCdf(rng.Uniform());
      ua[r] = static_cast<float>(rng.Uniform());
      ur[r] = static_cast<float>(rng.Uniform());
    }
    const auto [tok, acc] = RunVerifyDrafts(p_all, point_mass ? nullptr : &q_all, draft, ua, ur,
                                             n, vocab);
    std::vector<int> hist(vocab, 0);
    int accepted = 0;
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(tok[r] >= 0 && tok[r] < vocab) << "row " << r << ": " << tok[r];
      ASSERT_TRUE(acc[r] == 0 || acc[r] == 1) << "row " << r;
      if (acc[r]) {
        ASSERT_EQ(tok[r], draft[r]) << "row " << r;
      }
      ++hist[tok[r]];
      accepted += acc[r];
    }
    EXPECT_EQ(hist[2], 0);  // p = 0 is never emitted
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < vocab; ++i) {
      if (p[i] == 0.0f) continue;
      const double expect = double{p[i]} * n;
      chi2 += (hist[i] - expect) * (hist[i] - expect) / expect;
      ++df;
    }
    ASSERT_EQ(df, 6);
    EXPECT_LT(chi2, 22.46) << "chi-square with 6 degrees of freedom, p = 0.001";
    // Acceptance rate: sum_x q(x) min(1, p(x)/q(x)) for drafts from q; the
    // mean of p(x) over the cycled point-mass drafts.
    double rate = 0;
    for (int i = 0; i < vocab; ++i) {
      rate += point_mass ? double{p[i]} / vocab : std::min(double{p[i]}, double{q[i]});
    }
    const double sd = std::sqrt(rate * (1 - rate) / n);
    EXPECT_NEAR(static_cast<double>(accepted) / n, rate, 5 * sd);
  }
}

}  // namespace
}  // namespace specline

// Timings, not a check: run with --gtest_also_run_disabled_tests.
namespace specline {
namespace {

template <typename F>
double MeanMicros(F&& f, int iters = 200) {
  f();
  cudaEvent_t a, b;
  SPECLINE_CUDA_CHECK(cudaEventCreate(&a));
  SPECLINE_CUDA_CHECK(cudaEventCreate(&b));
  SPECLINE_CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) f();
  SPECLINE_CUDA_CHECK(cudaEventRecord(b));
  SPECLINE_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  SPECLINE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 1000.0 * ms / iters;
}

TEST(CudaKernelTimings, DISABLED_Print) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const DType t = DType::kBF16;
  for (int n : {1, 2048}) {
    const int dim = 4096, h = 14336;
    DeviceBuffer x = Upload(RandomVec(size_t{1} * n * dim, 1, -1, 1));
    DeviceBuffer d(2 * size_t{1} * n * dim), o(2 * size_t{1} * n * dim);
    DeviceBuffer w = Upload(RandomVec(dim, 2, 0.5f, 1.5f));
    SPECLINE_CUDA_CHECK(cudaMemset(d.get(), 0, d.bytes()));
    std::printf("AddRmsNorm n=%d dim=%d: %.2f us\n", n, dim, MeanMicros([&] {
                  cuda::AddRmsNorm(t, x.as<float>(), d.get(), w.as<float>(), 1e-5f, n, dim,
                                   o.get(), nullptr);
                }));
    DeviceBuffer gu(2 * size_t{2} * n * h), so(2 * size_t{1} * n * h);
    SPECLINE_CUDA_CHECK(cudaMemset(gu.get(), 0, gu.bytes()));
    std::printf("SwiGlu n=%d h=%d: %.2f us\n", n, h, MeanMicros([&] {
                  cuda::SwiGlu(t, gu.get(), n, h, so.get(), nullptr);
                }));
  }
  const int vocab = 152064;
  for (int n : {1, 8}) {
    DeviceBuffer logits = Upload(RandomVec(size_t{1} * n * vocab, 3, -8, 8));
    DeviceBuffer probs(sizeof(float) * n * vocab);
    DeviceBuffer out(4 * n), acc(4 * n);
    std::printf("ArgmaxRows n=%d: %.2f us\n", n, MeanMicros([&] {
                  cuda::ArgmaxRows(logits.as<float>(), n, vocab, out.as<int32_t>(), nullptr);
                }));
    const cuda::DeviceSamplingParams variants[] = {
        {1.0f, 0, 1.0f, 0.0f}, {0.7f, 20, 0.8f, 0.0f}, {0.9f, 0, 0.9f, 0.0f},
        {1.0f, 0, 0.95f, 0.05f}};
    for (const auto& v : variants) {
      DeviceBuffer params = Upload(std::vector<cuda::DeviceSamplingParams>(n, v));
      std::printf("WarpRows n=%d T=%.1f k=%d p=%.2f min_p=%.2f: %.2f us\n", n, v.temperature,
                  v.top_k, v.top_p, v.min_p, MeanMicros([&] {
                    cuda::WarpRows(logits.as<float>(), n, vocab,
                                   params.as<cuda::DeviceSamplingParams>(), probs.as<float>(),
                                   nullptr, nullptr);
                  }));
    }
    DeviceBuffer u = Upload(std::vector<float>(n, 0.7f));
    std::printf("SampleFromProbs n=%d: %.2f us\n", n, MeanMicros([&] {
                  cuda::SampleFromProbs(probs.as<float>(), n, vocab, u.as<float>(),
                                        out.as<int32_t>(), nullptr);
                }));
    DeviceBuffer draft = Upload(std::vector<int32_t>(n, 5));
    DeviceBuffer ua = Upload(std::vector<float>(n, 0.999f));
    std::printf("VerifyDrafts (rejecting) n=%d: %.2f us\n", n, MeanMicros([&] {
                  cuda::VerifyDrafts(probs.as<float>(), nullptr, draft.as<int32_t>(),
                                     ua.as<float>(), u.as<float>(), n, vocab, out.as<int32_t>(),
                                     acc.as<int32_t>(), nullptr);
                }));
  }
}

}  // namespace
}  // namespace specline
