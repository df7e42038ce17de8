// The GGML quant types Q5_0, Q5_1 and the K-quants Q2_K..Q6_K (with Q4_0,
// Q4_1 and Q8_0):
//  - DequantizeRow equals the `gguf` package's NumPy dequantizer bit for bit
//    on real llama-quantize output and on random-byte blocks (fixtures and
//    goldens from scripts/reference/kquant_golden.py, tests/data/kquants/),
//    and MatMul over those tensors equals fp32 MatMul over the golden values;
//  - the quantizers (EncodeValues) keep their error within per-type bounds
//    and come close to llama-quantize's output for the same values;
//  - a GGUF mixing all the types, as llama-quantize's Q4_K_M etc. files do,
//    loads and runs, with the same logits as an F32 copy of its dequantized
//    weights (prefill and decode).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/gguf.h"
#include "model/formats/gguf_writer.h"
#include "model/formats/model_source.h"
#include "model/formats/quantize.h"
#include "model/formats/random_model.h"
#include "model/runtime/local_pipeline.h"
#include "tests/test_util.h"

namespace specline {
namespace {

// The bit-for-bit comparisons with fp32 MatMul over the dequantized values
// hold on the fp32-activation path; the default int8 path is checked
// against a double reference in kernels/cpu/matmul_test.cc (Activations/MatMulTest).
struct Fp32Activations {
  Fp32Activations() { kernels::SetQuantizedActivations(false); }
  ~Fp32Activations() { kernels::SetQuantizedActivations(true); }
};

using nlohmann::json;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> ReadGolden() {
  const std::string bytes = testing::ReadFile(testing::SourcePath("tests/data/kquants/golden.f32"));
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

const json& Manifest() { return testing::GoldenJson("tests/data/kquants/golden.json"); }

std::unique_ptr<GgufFile> OpenFixtures() {
  return GgufFile::Open(testing::SourcePath("tests/data/kquants/fixtures.gguf"));
}

TEST(KQuantGolden, DequantizeRowMatchesNumpyBitForBit) {
  auto fixtures = OpenFixtures();
  const std::vector<float> golden = ReadGolden();
  const json& tensors = Manifest()["tensors"];
  ASSERT_EQ(tensors.size(), fixtures->tensors().size()) << "every fixture tensor has a golden";
  std::set<std::string> types;
  size_t total = 0;
  for (const json& g : tensors) {
    const std::string name = g["name"];
    SCOPED_TRACE(name);
    auto it = fixtures->tensors().find(name);
    ASSERT_NE(it, fixtures->tensors().end());
    const TensorInfo& t = it->second;
    ASSERT_EQ(std::string(DTypeName(t.dtype)), g["type"].get<std::string>());
    const int64_t rows = g["shape"][0], cols = g["shape"][1];
    ASSERT_EQ(t.shape, (std::vector<int64_t>{rows, cols}));
    const int64_t offset = g["offset"];
    ASSERT_LE(static_cast<size_t>(offset + rows * cols), golden.size());
    const int64_t row_bytes = *RowBytes(t.dtype, cols);
    std::vector<float> out(cols);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::DequantizeRow(t.dtype, static_cast<const uint8_t*>(t.data) + r * row_bytes, cols,
                             out.data());
      const float* want = golden.data() + offset + r * cols;
      if (std::memcmp(out.data(), want, cols * 4) != 0) {
        for (int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(Bits(out[c]), Bits(want[c]))
              << "row " << r << " col " << c << ": " << out[c] << " vs numpy " << want[c];
        }
      }
    }
    types.insert(g["type"].get<std::string>());
    total += rows * cols;
  }
  EXPECT_EQ(total, golden.size());
  EXPECT_EQ(types, (std::set<std::string>{"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
                                          "Q3_K", "Q4_K", "Q5_K", "Q6_K"}));
}

// MatMul (GEMV for m = 1, GEMM for m > 1) over the quantized fixtures, with
// fp32 activations, gives the same bits as fp32 MatMul over NumPy's values: the decoders inside the
// kernels are the golden ones too, and the reduction order is dtype-blind.
TEST(KQuantGolden, MatMulEqualsF32MatMulOverGoldenValues) {
  Fp32Activations fp32;
  auto fixtures = OpenFixtures();
  const std::vector<float> golden = ReadGolden();
  kernels::ThreadPool pool(2);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const json& g : Manifest()["tensors"]) {
    const std::string name = g["name"];
    SCOPED_TRACE(name);
    const TensorInfo& t = fixtures->tensors().at(name);
    const int64_t rows = g["shape"][0], cols = g["shape"][1];
    const float* values = golden.data() + g["offset"].get<int64_t>();
    kernels::WeightMatrix q{t.dtype, rows, cols, t.data, *RowBytes(t.dtype, cols)};
    kernels::WeightMatrix f{DType::kF32, rows, cols, values, cols * 4};
    for (int64_t m : {1, 5}) {
      std::vector<float> x(m * cols), yq(m * rows), yf(m * rows);
      for (float& v : x) v = u(rng);
      kernels::MatMul(q, x.data(), m, yq.data(), pool);
      kernels::MatMul(f, x.data(), m, yf.data(), pool);
      ASSERT_EQ(0, std::memcmp(yq.data(), yf.data(), yq.size() * 4)) << "m = " << m;
    }
  }
}

// --- quantizers ------------------------------------------------------------

struct Bound {
  DType t;
  double max_err;  // largest |error| / largest |x| of its block
  double rmse;     // sqrt(mean error^2) / sqrt(mean x^2), whole tensor
};

// Gaussian values with a few outliers, and blocks of zeros, of one sign and
// constants (the scale searches' degenerate cases).
std::vector<float> TestValues(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng) * 0.02f;
  for (int64_t i = 0; i < n; i += 97) x[i] *= 12.0f;
  std::fill(x.begin(), x.begin() + 256, 0.0f);
  for (int64_t i = 256; i < 512; ++i) x[i] = std::fabs(x[i]) + 0.01f;
  for (int64_t i = 512; i < 768; ++i) x[i] = -0.03f;
  return x;
}

TEST(Quantize, RoundTripErrorBounds) {
  // Measured on these values (seeds 1-3, max / rmse): Q8_0 0.0043 / 0.010,
  // Q4_0 0.125 / 0.15, Q4_1 0.067 / 0.10, Q5_0 0.062 / 0.082, Q5_1 0.032 /
  // 0.049, Q2_K 0.30 / 0.30, Q3_K 0.16 / 0.18, Q4_K 0.082 / 0.094, Q5_K
  // 0.029 / 0.047, Q6_K 0.016 / 0.029. The 32-element types' max errors are
  // at their analytic bounds (Q4_0: one step d = amax / 8 where -amax clips
  // to q = 15; Q5_0 amax / 16; Q4_1, Q5_1 half a step) plus fp16 rounding.
  const Bound bounds[] = {
      {DType::kQ8_0, 0.005, 0.012}, {DType::kQ4_0, 0.13, 0.17},   {DType::kQ4_1, 0.07, 0.12},
      {DType::kQ5_0, 0.066, 0.095}, {DType::kQ5_1, 0.035, 0.058}, {DType::kQ2_K, 0.35, 0.34},
      {DType::kQ3_K, 0.2, 0.21},    {DType::kQ4_K, 0.1, 0.11},    {DType::kQ5_K, 0.04, 0.055},
      {DType::kQ6_K, 0.022, 0.034}};
  const int64_t n = 64 * 256;
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<float> x = TestValues(n, seed);
    for (const Bound& b : bounds) {
      SCOPED_TRACE(std::string(DTypeName(b.t)) + " seed " + std::to_string(seed));
      const std::vector<uint8_t> bytes = EncodeValues(b.t, x.data(), n);
      ASSERT_EQ(static_cast<int64_t>(bytes.size()), *RowBytes(b.t, n));
      std::vector<float> y(n);
      kernels::DequantizeRow(b.t, bytes.data(), n, y.data());
      const int64_t block = BlockElems(b.t);
      double worst = 0, se = 0, sx = 0;
      for (int64_t s = 0; s < n; s += block) {
        float amax = 0, emax = 0;
        for (int64_t i = s; i < s + block; ++i) {
          amax = std::max(amax, std::fabs(x[i]));
          emax = std::max(emax, std::fabs(y[i] - x[i]));
          se += double(y[i] - x[i]) * (y[i] - x[i]);
          sx += double(x[i]) * x[i];
        }
        if (amax == 0) {
          ASSERT_EQ(emax, 0.0f) << "zero block " << s / block;
        } else {
          worst = std::max(worst, double(emax) / amax);
        }
      }
      const double rmse = std::sqrt(se / sx);
      EXPECT_LE(worst, b.max_err);
      EXPECT_LE(rmse, b.rmse);
      // Constant blocks of the asymmetric types come back nearly exact.
      if (b.t == DType::kQ4_1 || b.t == DType::kQ5_1) {
        for (int64_t i = 512; i < 768; ++i) ASSERT_NEAR(y[i], -0.03f, 2e-5f) << i;
      }
      RecordProperty(std::string(DTypeName(b.t)) + "_seed" + std::to_string(seed),
                     std::to_string(worst) + " " + std::to_string(rmse));
    }
  }
}

TEST(Quantize, RejectsPartialSuperBlocks) {
  std::vector<float> x(300, 1.0f);
  EXPECT_THROW(EncodeValues(DType::kQ4_K, x.data(), 288), std::invalid_argument);
  EXPECT_NO_THROW(EncodeValues(DType::kQ5_0, x.data(), 288));
}

// Our quantizers are ports of ggml's quantize_row_*_ref, which llama-quantize
// runs without an importance matrix: re-quantizing the fixtures' source
// values (the same random model) must give what llama-quantize wrote, up to
// rare rounding ties the two compilers resolve differently (fma contraction).
// The source values are RandomModelTensors' for the manifest's arguments: a
// change to the random model writer needs the fixtures regenerated
// (scripts/reference/kquant_golden.py).
TEST(Quantize, CloseToLlamaQuantize) {
  auto fixtures = OpenFixtures();
  std::map<std::string, std::unique_ptr<GgufFile>> sources;
  int64_t same_blocks = 0, blocks = 0;
  for (const json& g : Manifest()["tensors"]) {
    if (!g.contains("model")) continue;  // random bytes
    const std::string name = g["name"];
    SCOPED_TRACE(name);
    const std::string model = g["model"];
    if (!sources.count(model)) {
      // Rebuild the F32 model with the make-random-model arguments.
      ModelConfig c;
      c.arch = "llama";
      std::map<std::string, int> a;
      std::istringstream in(g["make_random_model"].get<std::string>());
      std::string k, v;
      while (in >> k >> v) a[k] = std::stoi(v);
      c.dim = a.at("--dim");
      c.hidden_dim = a.at("--hidden-dim");
      c.n_layers = a.at("--layers");
      c.n_heads = a.at("--heads");
      c.n_kv_heads = c.n_heads;
      c.head_dim = c.dim / c.n_heads;
      c.vocab_size = a.at("--vocab");
      c.max_seq_len = a.at("--seq-len");
      c.rope_style = RopeStyle::kInterleaved;
      const std::string path = testing::TempDir() + "/" + model + ".gguf";
      WriteRandomModel(c, ModelFormat::kGguf, path, a.at("--seed"), DType::kF32);
      sources[model] = GgufFile::Open(path);
    }
    const TensorInfo& src = sources[model]->tensors().at(g["tensor"].get<std::string>());
    const TensorInfo& q = fixtures->tensors().at(name);
    const int64_t rows = g["shape"][0], cols = g["shape"][1], row0 = g["row0"];
    ASSERT_EQ(src.dtype, DType::kF32);
    ASSERT_EQ(src.shape[1], cols);
    const float* x = static_cast<const float*>(src.data) + row0 * cols;
    const std::vector<uint8_t> ours = EncodeValues(q.dtype, x, rows * cols);
    const auto* theirs = static_cast<const uint8_t*>(q.data);
    const int64_t bb = BlockBytes(q.dtype), nb = rows * cols / BlockElems(q.dtype);
    for (int64_t b = 0; b < nb; ++b) {
      same_blocks += std::memcmp(ours.data() + b * bb, theirs + b * bb, bb) == 0;
    }
    blocks += nb;
    // Whatever the ties, the two encodings are equally good.
    std::vector<float> yo(rows * cols), yt(rows * cols);
    kernels::DequantizeRow(q.dtype, ours.data(), rows * cols, yo.data());
    kernels::DequantizeRow(q.dtype, theirs, rows * cols, yt.data());
    double eo = 0, et = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      eo += double(yo[i] - x[i]) * (yo[i] - x[i]);
      et += double(yt[i] - x[i]) * (yt[i] - x[i]);
    }
    EXPECT_LE(eo, et * 1.05 + 1e-12) << DTypeName(q.dtype);
  }
  ASSERT_GT(blocks, 0);
  RecordProperty("identical_blocks", std::to_string(same_blocks) + "/" + std::to_string(blocks));
  std::printf("blocks identical to llama-quantize's: %lld of %lld\n",
              static_cast<long long>(same_blocks), static_cast<long long>(blocks));
  EXPECT_GE(same_blocks * 10, blocks * 9);
}

// --- a mixed-type model ----------------------------------------------------

// The dtype of each matrix, in the spirit of llama-quantize's Q4_K_M (Q6_K
// output and half of attn_v / ffn_down, Q5_0 where rows are not whole
// super-blocks), stretched to use every type.
DType MixedType(const std::string& name) {
  static const std::map<std::string, DType> kTypes = {
      {"token_embd.weight", DType::kQ4_K},       {"output.weight", DType::kQ6_K},
      {"blk.0.attn_q.weight", DType::kQ4_K},     {"blk.1.attn_q.weight", DType::kQ3_K},
      {"blk.0.attn_k.weight", DType::kQ2_K},     {"blk.1.attn_k.weight", DType::kQ4_0},
      {"blk.0.attn_v.weight", DType::kQ6_K},     {"blk.1.attn_v.weight", DType::kQ5_K},
      {"blk.0.attn_output.weight", DType::kQ4_K}, {"blk.1.attn_output.weight", DType::kQ8_0},
      {"blk.0.ffn_gate.weight", DType::kQ5_K},   {"blk.1.ffn_gate.weight", DType::kQ4_1},
      {"blk.0.ffn_up.weight", DType::kQ3_K},     {"blk.1.ffn_up.weight", DType::kQ2_K},
      {"blk.0.ffn_down.weight", DType::kQ5_0},   {"blk.1.ffn_down.weight", DType::kQ5_1}};
  auto it = kTypes.find(name);
  return it == kTypes.end() ? DType::kF32 : it->second;
}

TEST(MixedTypeModel, LoadsAndRunsLikeItsDequantizedF32Copy) {
  Fp32Activations fp32;
  ModelConfig c;
  c.arch = "llama";
  c.dim = 256;
  c.hidden_dim = 352;  // ffn_down rows of 352: not whole super-blocks
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.max_seq_len = 64;
  c.rope_style = RopeStyle::kInterleaved;
  const std::string dir = testing::TempDir();
  WriteRandomModel(c, ModelFormat::kGguf, dir + "/f32.gguf", 3, DType::kF32);
  auto f32 = GgufFile::Open(dir + "/f32.gguf");
  // Same metadata; matrices quantized (mixed) or quantized and decoded back
  // (twin), 1-D tensors as they are.
  GgufWriter mixed, twin;
  for (const auto& [key, value] : f32->metadata()) {
    mixed.Set(key, *f32->TypeOf(key), value);
    twin.Set(key, *f32->TypeOf(key), value);
  }
  std::set<DType> used;
  for (const auto& [name, t] : f32->tensors()) {
    const DType d = MixedType(name);
    const auto* x = static_cast<const float*>(t.data);
    if (d == DType::kF32) {
      mixed.AddTensorFromF32(name, DType::kF32, t.shape, x);
      twin.AddTensorFromF32(name, DType::kF32, t.shape, x);
      continue;
    }
    ASSERT_EQ(t.shape.size(), 2u) << name;
    const std::vector<uint8_t> q = EncodeValues(d, x, t.numel());
    mixed.AddTensor(name, d, t.shape, q.data(), static_cast<int64_t>(q.size()));
    std::vector<float> back(t.numel());
    kernels::DequantizeRow(d, q.data(), t.numel(), back.data());
    twin.AddTensorFromF32(name, DType::kF32, t.shape, back.data());
    used.insert(d);
  }
  EXPECT_EQ(used.size(), 10u);
  mixed.Write(dir + "/mixed.gguf");
  twin.Write(dir + "/twin.gguf");

  auto mixed_src = OpenModel(dir + "/mixed.gguf");
  auto twin_src = OpenModel(dir + "/twin.gguf");
  EXPECT_EQ(mixed_src->Require("model.layers.0.mlp.down_proj.weight").dtype, DType::kQ5_0);
  EXPECT_EQ(mixed_src->Require("lm_head.weight").dtype, DType::kQ6_K);
  EXPECT_EQ(mixed_src->Require("model.embed_tokens.weight").dtype, DType::kQ4_K);

  LocalPipeline pm(*mixed_src, {0, c.n_layers}, {}, 2);
  LocalPipeline pt(*twin_src, {0, c.n_layers}, {}, 2);
  const std::vector<int32_t> prompt = {1, 17, 300, 5, 42, 511, 8};
  auto run = [&](LocalPipeline& p, std::span<const int32_t> tokens, int32_t pos0) {
    std::vector<SlotRef> slots;
    for (size_t i = 0; i < tokens.size(); ++i) slots.push_back({1, pos0 + int32_t(i)});
    SliceOutput out;
    EXPECT_TRUE(p.Forward(slots, tokens, {}, &out).ok());
    return p.head().Logits(out.hidden.data(), tokens.size());
  };
  // Prefill (GEMM) then two decode steps (GEMV).
  std::vector<float> lm = run(pm, prompt, 0), lt = run(pt, prompt, 0);
  ASSERT_EQ(lm.size(), prompt.size() * c.vocab_size);
  EXPECT_EQ(0, std::memcmp(lm.data(), lt.data(), lm.size() * 4));
  for (int32_t step = 0; step < 2; ++step) {
    const int32_t tok[1] = {int32_t(100 + step)};
    lm = run(pm, tok, int32_t(prompt.size()) + step);
    lt = run(pt, tok, int32_t(prompt.size()) + step);
    EXPECT_EQ(0, std::memcmp(lm.data(), lt.data(), lm.size() * 4)) << "decode step " << step;
  }
  // And the logits are finite and not all equal.
  float lo = lm[0], hi = lm[0];
  for (float v : lm) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 0.1f);
}

}  // namespace
}  // namespace specline
