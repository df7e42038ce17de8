// Model file formats: round trips through the writers, agreement between
// formats (q/k layouts included), the real stories260K checkpoint in both of
// its formats, sharded safetensors, and the errors for damaged files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/ops.h"
#include "model/formats/gguf.h"
#include "model/formats/gguf_names.h"
#include "model/formats/gguf_writer.h"
#include "model/formats/random_model.h"
#include "model/formats/rope_layout.h"
#include "model/formats/safetensors.h"
#include "tests/test_util.h"

namespace specline {
namespace {

namespace fs = std::filesystem;
using ::specline::testing::ReadFile;
using ::specline::testing::SharedModelPath;
using ::specline::testing::TempDir;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.arch = "llama";
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 80;
  c.max_seq_len = 32;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  return c;
}

ModelConfig Qwen3Config() {
  ModelConfig c = SmallConfig();
  c.arch = "qwen3";
  c.head_dim = 32;  // not dim / n_heads, as in real Qwen3
  c.qk_norm = true;
  c.rope_theta = 1e6f;
  c.norm_eps = 1e-6f;
  c.tied_embeddings = true;
  return c;
}

ModelConfig Qwen2Config() {
  ModelConfig c = SmallConfig();
  c.arch = "qwen2";
  c.qkv_bias = true;
  return c;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
}

// The tensor's values as fp32, in Hugging Face (rotate_half) row layout.
std::vector<float> HalfLayoutValues(const ModelSource& src, const TensorInfo& t) {
  const int64_t n = t.numel();
  std::vector<float> v(n);
  kernels::DequantizeRow(t.dtype, t.data, n, v.data());
  if (src.config().rope_style == RopeStyle::kHalf) return v;
  const ModelConfig& c = src.config();
  auto ends_with = [&](const std::string& s) {
    return t.name.size() >= s.size() &&
           t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
  };
  int64_t heads = 0;
  if (ends_with("q_proj.weight") || ends_with("q_proj.bias")) heads = c.n_heads;
  if (ends_with("k_proj.weight") || ends_with("k_proj.bias")) heads = c.n_kv_heads;
  if (ends_with("q_norm.weight") || ends_with("k_norm.weight")) heads = 1;
  if (heads == 0) return v;
  std::vector<float> out(n);
  InterleavedToHalfRows(v.data(), out.data(), heads, c.head_dim,
                        (t.shape.size() == 2 ? t.shape[1] : 1) * 4);
  return out;
}

// Checks every tensor of the logical model is in `src` with its values
// (within `tol` relative to the tensor's largest magnitude), and nothing else
// but rope_freqs.
void ExpectLogicalModel(const ModelSource& src, const ModelConfig& c, uint64_t seed,
                        float tol) {
  auto expected = RandomModelTensors(c, seed);
  size_t found = 0;
  for (const RandomTensor& e : expected) {
    const TensorInfo* t = src.Find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    ++found;
    EXPECT_EQ(t->shape, e.shape) << e.name;
    std::vector<float> got = HalfLayoutValues(src, *t);
    float amax = 0;
    for (float x : e.values) amax = std::max(amax, std::fabs(x));
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - e.values[i]));
    }
    EXPECT_LE(worst, tol * amax) << e.name << " in " << src.path();
  }
  size_t extra = src.Tensors().size() - found;
  EXPECT_EQ(extra, src.Find("rope_freqs.weight") ? 1u : 0u);
}

void ExpectSameShape(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_FLOAT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_FLOAT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.llama3_scaling.has_value(), b.llama3_scaling.has_value());
}

template <typename E = ModelFormatError, typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no " << ::testing::internal::GetTypeName<E>() << " thrown";
  return "";
}

TEST(Formats, Llama2cRoundTrip) {
  for (bool tied : {true, false}) {
    ModelConfig c = SmallConfig();
    c.tied_embeddings = tied;
    std::string path = TempDir() + "/model.bin";
    WriteRandomModel(c, ModelFormat::kLlama2c, path, 7);
    auto src = OpenModel(path);
    EXPECT_EQ(src->format(), ModelFormat::kLlama2c);
    EXPECT_EQ(src->config().rope_style, RopeStyle::kInterleaved);
    ExpectSameShape(src->config(), c);
    EXPECT_EQ(src->Find("lm_head.weight") != nullptr, !tied);
    ExpectLogicalModel(*src, c, 7, 0.0f);
  }
}

TEST(Formats, GgufRoundTripAllDtypes) {
  // Tolerances relative to each tensor's largest value.
  const std::pair<DType, float> cases[] = {
      {DType::kF32, 0.0f},     {DType::kF16, 1e-3f},   {DType::kBF16, 8e-3f},
      {DType::kQ8_0, 1e-2f},   {DType::kQ4_0, 0.16f},  {DType::kQ4_1, 0.08f},
      {DType::kQ5_0, 0.08f},   {DType::kQ5_1, 0.04f}};
  for (auto [dtype, tol] : cases) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    ModelConfig c = SmallConfig();
    std::string path = TempDir() + "/model.gguf";
    WriteRandomModel(c, ModelFormat::kGguf, path, 11, dtype);
    auto src = OpenModel(path);
    EXPECT_EQ(src->format(), ModelFormat::kGguf);
    ASSERT_NE(src->gguf(), nullptr);
    EXPECT_EQ(src->config().rope_style, RopeStyle::kInterleaved);
    ExpectSameShape(src->config(), c);
    EXPECT_EQ(src->Require("model.layers.1.mlp.down_proj.weight").dtype, dtype);
    EXPECT_EQ(src->Require("model.norm.weight").dtype, DType::kF32);
    EXPECT_EQ(src->Require("model.embed_tokens.weight").file_name, "token_embd.weight");
    ExpectLogicalModel(*src, c, 11, tol);
  }
}

// K-quants need rows of whole 256-element super-blocks.
TEST(Formats, GgufRoundTripKQuants) {
  // Largest error relative to the tensor's largest value (measured: Q2_K
  // 0.41, Q3_K 0.27, Q4_K 0.115, Q5_K 0.066, Q6_K < 0.025): ggml's scale
  // searches minimize a weighted squared error and may clip the extremes.
  const std::pair<DType, float> cases[] = {{DType::kQ2_K, 0.5f}, {DType::kQ3_K, 0.33f},
                                           {DType::kQ4_K, 0.14f}, {DType::kQ5_K, 0.08f},
                                           {DType::kQ6_K, 0.03f}};
  ModelConfig c = SmallConfig();
  c.dim = 256;
  c.hidden_dim = 512;
  c.n_layers = 1;
  c.head_dim = 64;
  for (auto [dtype, tol] : cases) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    std::string path = TempDir() + "/model.gguf";
    WriteRandomModel(c, ModelFormat::kGguf, path, 11, dtype);
    auto src = OpenModel(path);
    ExpectSameShape(src->config(), c);
    EXPECT_EQ(src->Require("model.layers.0.mlp.down_proj.weight").dtype, dtype);
    EXPECT_EQ(src->Require("model.embed_tokens.weight").dtype, dtype);
    ExpectLogicalModel(*src, c, 11, tol);
  }
  // Rows that are not whole super-blocks are refused with the reason.
  std::string err = ErrorOf<std::invalid_argument>(
      [&] { WriteRandomModel(SmallConfig(), ModelFormat::kGguf, TempDir() + "/x.gguf", 1, DType::kQ4_K); });
  EXPECT_NE(err.find("Q4_K block size"), std::string::npos) << err;
}

// --vocab-from: the tokenizer.* metadata of a vocabulary GGUF is copied with
// its stored types, and the model then has that tokenizer.
TEST(Formats, GgufVocabFrom) {
  const std::string dir = TempDir();
  GgufWriter v;
  v.SetString("general.architecture", "llama");
  v.SetString("tokenizer.ggml.model", "llama");
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 256; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", i);
    pieces.push_back(buf);
  }
  for (int i = 0; pieces.size() < 300; ++i) pieces.push_back("\xe2\x96\x81w" + std::to_string(i));
  std::vector<float> scores(pieces.size());
  std::vector<int32_t> types(pieces.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  for (int i = 3; i < 259; ++i) types[i] = 6;
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -float(i);
  v.SetStringArray("tokenizer.ggml.tokens", pieces);
  v.SetF32Array("tokenizer.ggml.scores", scores);
  v.SetI32Array("tokenizer.ggml.token_type", types);
  v.SetU32("tokenizer.ggml.bos_token_id", 1);
  v.SetU32("tokenizer.ggml.eos_token_id", 2);
  v.SetBool("tokenizer.ggml.add_bos_token", true);
  v.SetString("general.name", "not copied");
  v.Write(dir + "/vocab.gguf");

  ModelConfig c = SmallConfig();
  c.vocab_size = 300;
  WriteRandomModel(c, ModelFormat::kGguf, dir + "/m.gguf", 5, DType::kQ5_0, dir + "/vocab.gguf");
  auto vocab = GgufFile::Open(dir + "/vocab.gguf");
  auto m = GgufFile::Open(dir + "/m.gguf");
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                          "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
                          "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token"}) {
    SCOPED_TRACE(key);
    ASSERT_NE(m->Find(key), nullptr);
    EXPECT_EQ(*m->TypeOf(key), *vocab->TypeOf(key));
  }
  EXPECT_EQ(*m->TypeOf("tokenizer.ggml.tokens"),
            (std::vector<GgufType>{GgufType::kArray, GgufType::kString}));
  EXPECT_EQ(*m->TypeOf("tokenizer.ggml.bos_token_id"), std::vector<GgufType>{GgufType::kUint32});
  EXPECT_EQ(*m->Find("general.name")->AsString(), "specline-random");
  EXPECT_EQ(m->Find("tokenizer.ggml.tokens")->AsArray()->size(), 300u);
  auto src = OpenModel(dir + "/m.gguf");
  ExpectLogicalModel(*src, c, 5, 0.08f);

  // The vocabulary must have the model's vocab size; only GGUF takes one.
  c.vocab_size = 299;
  std::string err = ErrorOf<std::invalid_argument>(
      [&] { WriteRandomModel(c, ModelFormat::kGguf, dir + "/n.gguf", 5, DType::kF32, dir + "/vocab.gguf"); });
  EXPECT_NE(err.find("300 pieces"), std::string::npos) << err;
  EXPECT_THROW(WriteRandomModel(c, ModelFormat::kHuggingFace, dir + "/hf", 5, DType::kF32,
                                dir + "/vocab.gguf"),
               std::invalid_argument);
}

TEST(Formats, HuggingFaceRoundTrip) {
  const std::pair<DType, float> cases[] = {
      {DType::kF32, 0.0f}, {DType::kF16, 1e-3f}, {DType::kBF16, 8e-3f}};
  for (auto [dtype, tol] : cases) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    ModelConfig c = SmallConfig();
    std::string dir = TempDir() + "/hf";
    WriteRandomModel(c, ModelFormat::kHuggingFace, dir, 13, dtype);
    auto src = OpenModel(dir);
    EXPECT_EQ(src->format(), ModelFormat::kHuggingFace);
    EXPECT_EQ(src->config().rope_style, RopeStyle::kHalf);
    ExpectSameShape(src->config(), c);
    ExpectLogicalModel(*src, c, 13, tol);
    // A file inside the directory opens the directory.
    EXPECT_EQ(OpenModel(dir + "/config.json")->Tensors().size(), src->Tensors().size());
  }
}

// The three fp32 files of one logical model hold the same numbers once q/k
// are put in one layout, and the interleaved files really are permuted.
TEST(Formats, SameModelInAllFormats) {
  ModelConfig c = SmallConfig();
  std::string dir = TempDir();
  WriteRandomModel(c, ModelFormat::kLlama2c, dir + "/m.bin", 5);
  WriteRandomModel(c, ModelFormat::kGguf, dir + "/m.gguf", 5);
  WriteRandomModel(c, ModelFormat::kHuggingFace, dir + "/hf", 5);
  auto bin = OpenModel(dir + "/m.bin");
  auto gguf = OpenModel(dir + "/m.gguf");
  auto hf = OpenModel(dir + "/hf");
  ASSERT_EQ(bin->Tensors().size(), hf->Tensors().size());
  ASSERT_EQ(gguf->Tensors().size(), hf->Tensors().size());
  for (const TensorInfo* t : hf->Tensors()) {
    const TensorInfo& b = bin->Require(t->name, t->shape);
    const TensorInfo& g = gguf->Require(t->name, t->shape);
    EXPECT_EQ(0, std::memcmp(b.data, g.data, t->nbytes)) << t->name;
    EXPECT_EQ(HalfLayoutValues(*hf, *t), HalfLayoutValues(*gguf, g)) << t->name;
    bool is_qk = t->name.find("q_proj") != std::string::npos ||
                 t->name.find("k_proj") != std::string::npos;
    EXPECT_EQ(std::memcmp(t->data, g.data, t->nbytes) != 0, is_qk) << t->name;
  }
  // Row 1 of head 0 in interleaved layout is row head_dim/2 in HF layout.
  const float* hq = static_cast<const float*>(hf->Require("model.layers.0.self_attn.q_proj.weight").data);
  const float* gq = static_cast<const float*>(gguf->Require("model.layers.0.self_attn.q_proj.weight").data);
  EXPECT_EQ(0, std::memcmp(gq + 1 * c.dim, hq + (c.head_dim / 2) * c.dim, c.dim * 4));
}

TEST(Formats, QwenArchitectures) {
  for (ModelConfig c : {Qwen2Config(), Qwen3Config()}) {
    SCOPED_TRACE(c.arch);
    std::string dir = TempDir();
    WriteRandomModel(c, ModelFormat::kGguf, dir + "/m.gguf", 3);
    WriteRandomModel(c, ModelFormat::kHuggingFace, dir + "/hf", 3);
    for (std::string p : {dir + "/m.gguf", dir + "/hf"}) {
      auto src = OpenModel(p);
      EXPECT_EQ(src->config().arch, c.arch);
      EXPECT_EQ(src->config().rope_style, RopeStyle::kHalf);
      ExpectSameShape(src->config(), c);
      ExpectLogicalModel(*src, c, 3, 0.0f);
    }
    EXPECT_THROW(WriteRandomModel(c, ModelFormat::kLlama2c, dir + "/m.bin", 3),
                 std::invalid_argument);
  }
}

TEST(Formats, Llama3RopeScaling) {
  ModelConfig c = SmallConfig();
  c.rope_theta = 500000.0f;
  c.head_dim = 64;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.llama3_scaling = Llama3RopeScaling{8.0f, 1.0f, 4.0f, 8192};
  std::string dir = TempDir();
  WriteRandomModel(c, ModelFormat::kGguf, dir + "/m.gguf", 1);
  WriteRandomModel(c, ModelFormat::kHuggingFace, dir + "/hf", 1);
  for (std::string p : {dir + "/m.gguf", dir + "/hf"}) {
    auto src = OpenModel(p);
    ASSERT_TRUE(src->config().llama3_scaling.has_value()) << p;
    const Llama3RopeScaling& s = *src->config().llama3_scaling;
    EXPECT_FLOAT_EQ(s.factor, 8.0f);
    EXPECT_NEAR(s.low_freq_factor, 1.0f, 1e-3);
    EXPECT_NEAR(s.high_freq_factor, 4.0f, 1e-3);
    EXPECT_EQ(s.original_max_position, 8192);
  }
}

TEST(Formats, Stories260kBinAndGgufAgree) {
  std::string bin_path = SharedModelPath("stories260K/stories260K.bin");
  std::string gguf_path = SharedModelPath("stories260K/stories260K.gguf");
  if (bin_path.empty() || gguf_path.empty()) {
    GTEST_SKIP() << "../shared/models/stories260K not present";
  }
  auto bin = OpenModel(bin_path);
  auto gguf = OpenModel(gguf_path);
  const ModelConfig& b = bin->config();
  EXPECT_EQ(b.dim, 64);
  EXPECT_EQ(b.hidden_dim, 172);
  EXPECT_EQ(b.n_layers, 5);
  EXPECT_EQ(b.n_heads, 8);
  EXPECT_EQ(b.n_kv_heads, 4);
  EXPECT_EQ(b.head_dim, 8);
  EXPECT_EQ(b.vocab_size, 512);
  EXPECT_EQ(b.max_seq_len, 512);
  EXPECT_TRUE(b.tied_embeddings);
  const ModelConfig& g = gguf->config();
  EXPECT_EQ(g.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(std::tie(g.dim, g.hidden_dim, g.n_layers, g.n_heads, g.n_kv_heads, g.head_dim,
                     g.vocab_size),
            std::tie(b.dim, b.hidden_dim, b.n_layers, b.n_heads, b.n_kv_heads, b.head_dim,
                     b.vocab_size));
  EXPECT_EQ(bin->Tensors().size(), 1u + 9u * 5u + 1u);
  for (const TensorInfo* t : bin->Tensors()) {
    const TensorInfo& other = gguf->Require(t->name, t->shape);
    ASSERT_EQ(other.dtype, DType::kF32);
    EXPECT_EQ(0, std::memcmp(t->data, other.data, t->nbytes)) << t->name;
  }
  // The GGUF carries the shared classifier as an explicit output.weight.
  const TensorInfo* lm = gguf->Find("lm_head.weight");
  if (lm) {
    const TensorInfo& emb = bin->Require("model.embed_tokens.weight");
    EXPECT_EQ(0, std::memcmp(lm->data, emb.data, emb.nbytes));
  }
}

TEST(Formats, SmolLm2Q4_1) {
  std::string path = ::specline::testing::SmolLm2Path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not in the model cache (scripts/setup.sh)";
  auto src = OpenModel(path);
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(src->Require("model.layers.0.self_attn.q_proj.weight", {576, 576}).dtype,
            DType::kQ4_1);
}

TEST(Formats, ShardedSafetensors) {
  ModelConfig c = SmallConfig();
  std::string dir = TempDir() + "/hf";
  WriteRandomModel(c, ModelFormat::kHuggingFace, dir, 9);
  auto whole = SafetensorsFile::Open(dir + "/model.safetensors");
  std::vector<TensorInfo> a, b;
  nlohmann::json index;
  for (const auto& [name, t] : whole->tensors()) {
    bool first = name.find("layers.1.") == std::string::npos;
    (first ? a : b).push_back(t);
    index["weight_map"][name] =
        first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors", a);
  WriteSafetensors(dir + "/model-00002-of-00002.safetensors", b);
  {
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  }
  whole.reset();
  fs::remove(dir + "/model.safetensors");
  auto src = OpenModel(dir);
  ExpectLogicalModel(*src, c, 9, 0.0f);
  EXPECT_NE(src->Require("model.layers.1.mlp.up_proj.weight").file_path,
            src->Require("model.layers.0.mlp.up_proj.weight").file_path);

  // An index naming a tensor its shard lacks.
  index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  std::string err = ErrorOf([&] { OpenModel(dir); });
  EXPECT_NE(err.find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << err;
  // An index pointing outside the directory.
  index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = "../x.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  err = ErrorOf([&] { OpenModel(dir); });
  EXPECT_NE(err.find("invalid shard"), std::string::npos) << err;
}

TEST(Formats, GgufMetadataTypes) {
  GgufWriter w;
  w.SetU32("a.u32", 4000000000u);
  w.SetI32("a.i32", -5);
  w.SetU64("a.u64", 1ull << 40);
  w.SetF32("a.f32", 0.25f);
  w.SetBool("a.bool", true);
  w.SetString("a.str", "h\xc3\xa9llo");
  w.SetStringArray("a.strs", {"x", "", "yz"});
  w.SetF32Array("a.f32s", {1.5f, -2.0f});
  w.SetI32Array("a.i32s", {});
  GgufValue inner1, inner2, outer;
  inner1.v = std::make_shared<GgufValue::Array>(GgufValue::Array{{int64_t{1}}, {int64_t{-2}}});
  inner2.v = std::make_shared<GgufValue::Array>(GgufValue::Array{{int64_t{3}}});
  outer.v = std::make_shared<GgufValue::Array>(GgufValue::Array{inner1, inner2});
  w.Set("a.nested", {GgufType::kArray, GgufType::kArray, GgufType::kInt16}, outer);
  GgufValue f64;
  f64.v = 0.1;
  w.Set("a.f64", {GgufType::kFloat64}, f64);
  std::vector<float> x(64, 0.5f);
  w.AddTensorFromF32("t", DType::kQ8_0, {2, 32}, x.data());
  w.set_alignment(64);
  w.set_version(2);
  std::string path = TempDir() + "/meta.gguf";
  w.Write(path);

  auto f = GgufFile::Open(path);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->Find("a.u32")->AsInt(), 4000000000);
  EXPECT_EQ(f->Find("a.i32")->AsInt(), -5);
  EXPECT_EQ(f->Find("a.u64")->AsInt(), int64_t{1} << 40);
  EXPECT_EQ(f->Find("a.f32")->AsFloat(), 0.25);
  EXPECT_EQ(f->Find("a.bool")->AsBool(), true);
  EXPECT_EQ(*f->Find("a.str")->AsString(), "h\xc3\xa9llo");
  const auto* strs = f->Find("a.strs")->AsArray();
  ASSERT_EQ(strs->size(), 3u);
  EXPECT_EQ(*(*strs)[2].AsString(), "yz");
  EXPECT_EQ((*f->Find("a.f32s")->AsArray())[1].AsFloat(), -2.0);
  EXPECT_TRUE(f->Find("a.i32s")->AsArray()->empty());
  const auto* nested = f->Find("a.nested")->AsArray();
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ((*(*nested)[0].AsArray())[1].AsInt(), -2);
  EXPECT_EQ((*(*nested)[1].AsArray())[0].AsInt(), 3);
  EXPECT_DOUBLE_EQ(*f->Find("a.f64")->AsFloat(), 0.1);
  EXPECT_EQ(f->Find("general.alignment")->AsInt(), 64);
  EXPECT_EQ(f->Find("missing"), nullptr);
  const TensorInfo& t = f->tensors().at("t");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(t.nbytes, 68);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
  float back[64];
  kernels::DequantizeRow(DType::kQ8_0, t.data, 64, back);
  EXPECT_NEAR(back[63], 0.5f, 1e-3f);  // the scale is stored as fp16
}

TEST(Formats, TensorNameMapping) {
  EXPECT_EQ(GgufToHfName("blk.12.attn_k.bias"), "model.layers.12.self_attn.k_proj.bias");
  EXPECT_EQ(GgufToHfName("blk.0.attn_q_norm.weight"), "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(GgufToHfName("output.weight"), "lm_head.weight");
  EXPECT_EQ(GgufToHfName("rope_freqs.weight"), std::nullopt);
  EXPECT_EQ(GgufToHfName("blk.x.attn_q.weight"), std::nullopt);
  EXPECT_EQ(HfToGgufName("model.layers.3.mlp.down_proj.weight"), "blk.3.ffn_down.weight");
  EXPECT_EQ(HfToGgufName("model.embed_tokens.weight"), "token_embd.weight");
}

// Writes sample files for scripts/reference/check_writers.py, which reads
// them with the Python gguf, safetensors and transformers packages. Runs only
// when SPECLINE_WRITER_SAMPLES names an output directory.
// The samples scripts/reference/check_writers.py reads with independent
// Python readers (the `gguf` and `safetensors` packages, numpy):
// scripts/test.sh runs it on this directory right after ctest. They go to
// $SPECLINE_WRITER_SAMPLES, else to <build>/writer-samples; each is removed
// before it is written, so nothing stale can stand in for a sample this run
// failed to write, and each must load back here as the logical model.
TEST(Formats, WriteSamplesForPythonCheck) {
  const char* env = std::getenv("SPECLINE_WRITER_SAMPLES");
  const std::string dir =
      env && *env ? std::string(env) : std::string(SPECLINE_BINARY_DIR) + "/writer-samples";
  fs::create_directories(dir);
  ModelConfig llama = SmallConfig();
  llama.tied_embeddings = false;
  struct Sample {
    std::string name;
    ModelConfig config;
    ModelFormat format;
    DType dtype;
    float tol;  // relative to each tensor's largest value (as the round trips)
  };
  std::vector<Sample> samples = {{"llama.bin", llama, ModelFormat::kLlama2c, DType::kF32, 0.0f}};
  const std::pair<DType, float> gguf_dtypes[] = {
      {DType::kF32, 0.0f},   {DType::kF16, 1e-3f},  {DType::kBF16, 8e-3f},
      {DType::kQ8_0, 1e-2f}, {DType::kQ4_0, 0.16f}, {DType::kQ4_1, 0.08f},
      {DType::kQ5_0, 0.08f}, {DType::kQ5_1, 0.04f}};
  for (auto [d, tol] : gguf_dtypes) {
    samples.push_back({"llama-" + std::string(DTypeName(d)) + ".gguf", llama, ModelFormat::kGguf, d, tol});
  }
  samples.push_back({"llama-hf", llama, ModelFormat::kHuggingFace, DType::kF32, 0.0f});
  samples.push_back({"llama-hf-bf16", llama, ModelFormat::kHuggingFace, DType::kBF16, 8e-3f});
  samples.push_back({"qwen3-F32.gguf", Qwen3Config(), ModelFormat::kGguf, DType::kF32, 0.0f});
  samples.push_back({"qwen3-hf", Qwen3Config(), ModelFormat::kHuggingFace, DType::kF32, 0.0f});
  samples.push_back({"qwen2-F32.gguf", Qwen2Config(), ModelFormat::kGguf, DType::kF32, 0.0f});
  samples.push_back({"qwen2-hf", Qwen2Config(), ModelFormat::kHuggingFace, DType::kF32, 0.0f});
  for (const Sample& s : samples) {
    SCOPED_TRACE(s.name);
    const std::string path = dir + "/" + s.name;
    fs::remove_all(path);
    WriteRandomModel(s.config, s.format, path, 42, s.dtype);
    ASSERT_TRUE(fs::exists(path));
    auto src = OpenModel(path);
    EXPECT_EQ(src->format(), s.format);
    ExpectSameShape(src->config(), s.config);
    ExpectLogicalModel(*src, s.config, 42, s.tol);
  }
  std::printf("writer samples in %s\n", dir.c_str());
}

// --- errors ---------------------------------------------------------------

TEST(FormatErrors, TruncatedGguf) {
  std::string dir = TempDir();
  WriteRandomModel(SmallConfig(), ModelFormat::kGguf, dir + "/m.gguf", 1);
  std::string bytes = ReadFile(dir + "/m.gguf");
  for (size_t len : {size_t{0}, size_t{3}, size_t{10}, size_t{100}, size_t{1000},
                     bytes.size() / 2, bytes.size() - 1}) {
    std::string p = dir + "/cut.gguf";
    WriteBytes(p, bytes.substr(0, len));
    std::string err = ErrorOf([&] { OpenModel(p); });
    EXPECT_NE(err.find(p), std::string::npos) << err;
  }
  WriteBytes(dir + "/cut.gguf", bytes.substr(0, bytes.size() - 1));
  std::string err = ErrorOf([&] { OpenModel(dir + "/cut.gguf"); });
  EXPECT_NE(err.find("past the end"), std::string::npos) << err;
}

TEST(FormatErrors, Llama2cWrongSize) {
  std::string dir = TempDir();
  WriteRandomModel(SmallConfig(), ModelFormat::kLlama2c, dir + "/m.bin", 1);
  std::string bytes = ReadFile(dir + "/m.bin");
  for (std::string cut : {bytes.substr(0, bytes.size() - 4), bytes + "xxxx"}) {
    WriteBytes(dir + "/bad.bin", cut);
    std::string err = ErrorOf([&] { OpenModel(dir + "/bad.bin"); });
    EXPECT_NE(err.find(dir + "/bad.bin"), std::string::npos) << err;
    EXPECT_NE(err.find("expected " + std::to_string(bytes.size()) + " bytes"),
              std::string::npos) << err;
    EXPECT_NE(err.find(std::to_string(cut.size())), std::string::npos) << err;
  }
  WriteBytes(dir + "/short.bin", bytes.substr(0, 10));
  EXPECT_NE(ErrorOf([&] { OpenModel(dir + "/short.bin"); }).find("truncated"),
            std::string::npos);
}

TEST(FormatErrors, UnsupportedGgufType) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  std::vector<float> x(32, 1.0f);
  w.AddTensorFromF32("blk.0.ffn_up.weight", DType::kF32, {32}, x.data());
  std::string bytes = w.Serialize();
  // Patch the tensor's type (after name, n_dims, ne[0]) to 20 = IQ4_NL (a
  // 32-element block type of the IQ family, which stays unsupported).
  size_t pos = bytes.find("blk.0.ffn_up.weight") + 19 + 4 + 8;
  uint32_t iq4_nl = 20;
  std::memcpy(&bytes[pos], &iq4_nl, 4);
  std::string p = TempDir() + "/iq4nl.gguf";
  WriteBytes(p, bytes);
  std::string err = ErrorOf([&] { GgufFile::Open(p); });
  EXPECT_NE(err.find(p), std::string::npos) << err;
  EXPECT_NE(err.find("blk.0.ffn_up.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("IQ4_NL"), std::string::npos) << err;
  EXPECT_NE(err.find("Q6_K"), std::string::npos) << "the supported list: " << err;
}

TEST(FormatErrors, UnsupportedSafetensorsDtype) {
  std::string dir = TempDir() + "/hf";
  WriteRandomModel(SmallConfig(), ModelFormat::kHuggingFace, dir, 1);
  std::string header = R"({"model.norm.weight":{"dtype":"I8","shape":[64],"data_offsets":[0,64]}})";
  uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += header + std::string(64, '\0');
  WriteBytes(dir + "/model.safetensors", bytes);
  std::string err = ErrorOf([&] { OpenModel(dir); });
  EXPECT_NE(err.find(dir + "/model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("model.norm.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("I8"), std::string::npos) << err;
}

TEST(FormatErrors, SafetensorsBadOffsetsAndHeader) {
  std::string p = TempDir() + "/x.safetensors";
  auto with_header = [&](const std::string& header, size_t data) {
    uint64_t n = header.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    WriteBytes(p, bytes + header + std::string(data, '\0'));
    return ErrorOf([&] { SafetensorsFile::Open(p); });
  };
  EXPECT_NE(with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)
                .find("outside"), std::string::npos);
  EXPECT_NE(with_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 8)
                .find("need 16"), std::string::npos);
  EXPECT_NE(with_header("{not json", 0).find("JSON"), std::string::npos);
  uint64_t huge = 1ull << 40;
  WriteBytes(p, std::string(reinterpret_cast<const char*>(&huge), 8) + "{}");
  EXPECT_NE(ErrorOf([&] { SafetensorsFile::Open(p); }).find("exceeds"), std::string::npos);
}

TEST(FormatErrors, MissingTensors) {
  ModelConfig c = SmallConfig();
  // GGUF without one layer tensor.
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.embedding_length", c.dim);
  w.SetU32("llama.feed_forward_length", c.hidden_dim);
  w.SetU32("llama.block_count", c.n_layers);
  w.SetU32("llama.attention.head_count", c.n_heads);
  w.SetU32("llama.attention.head_count_kv", c.n_kv_heads);
  for (const RandomTensor& t : RandomModelTensors(c, 1)) {
    if (t.name == "model.layers.1.mlp.up_proj.weight") continue;
    w.AddTensorFromF32(*HfToGgufName(t.name), DType::kF32, t.shape, t.values.data());
  }
  std::string p = TempDir() + "/missing.gguf";
  w.Write(p);
  std::string err = ErrorOf([&] { OpenModel(p); });
  EXPECT_NE(err.find(p), std::string::npos) << err;
  EXPECT_NE(err.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << err;

  // Untied HF model without lm_head.
  c.tied_embeddings = false;
  std::string dir = TempDir() + "/hf";
  WriteRandomModel(c, ModelFormat::kHuggingFace, dir, 1);
  auto whole = SafetensorsFile::Open(dir + "/model.safetensors");
  std::vector<TensorInfo> keep;
  for (const auto& [name, t] : whole->tensors()) {
    if (name != "lm_head.weight") keep.push_back(t);
  }
  WriteSafetensors(dir + "/model2.safetensors", keep);
  whole.reset();
  fs::rename(dir + "/model2.safetensors", dir + "/model.safetensors");
  err = ErrorOf([&] { OpenModel(dir); });
  EXPECT_NE(err.find("lm_head.weight"), std::string::npos) << err;
}

TEST(FormatErrors, RequireShapeAndMissing) {
  std::string p = TempDir() + "/m.gguf";
  WriteRandomModel(SmallConfig(), ModelFormat::kGguf, p, 1);
  auto src = OpenModel(p);
  std::string err = ErrorOf([&] { src->Require("model.norm.weight", {65}); });
  EXPECT_NE(err.find("shape [64], expected [65]"), std::string::npos) << err;
  EXPECT_NE(err.find("output_norm.weight"), std::string::npos) << err;
  err = ErrorOf([&] { src->Require("nope"); });
  EXPECT_NE(err.find("missing tensor 'nope'"), std::string::npos) << err;
  EXPECT_NE(err.find(p), std::string::npos) << err;
}

TEST(FormatErrors, PathsAndConfigs) {
  std::string dir = TempDir();
  EXPECT_NE(ErrorOf([&] { OpenModel(dir + "/nothing"); }).find("no such file"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { OpenModel(dir); }).find("config.json"), std::string::npos);
  WriteRandomModel(SmallConfig(), ModelFormat::kHuggingFace, dir + "/hf", 1);
  std::ofstream(dir + "/hf/config.json") << R"({"model_type": "gpt2"})";
  EXPECT_NE(ErrorOf([&] { OpenModel(dir + "/hf"); }).find("gpt2"), std::string::npos);
}

TEST(ModelConfig, Validate) {
  ModelConfig c = SmallConfig();
  EXPECT_EQ(c.Validate(), "");
  ModelConfig bad = c;
  bad.n_kv_heads = 3;
  EXPECT_NE(bad.Validate().find("multiple"), std::string::npos);
  bad = c;
  bad.head_dim = 15;
  EXPECT_NE(bad.Validate(), "");
  bad = c;
  bad.dim = 0;
  EXPECT_NE(bad.Validate().find("dim"), std::string::npos);
  bad = c;
  bad.norm_eps = -1.0f;
  EXPECT_NE(bad.Validate(), "");
  bad = c;
  bad.llama3_scaling = Llama3RopeScaling{8.0f, 4.0f, 1.0f, 8192};
  EXPECT_NE(bad.Validate(), "");
}

}  // namespace
}  // namespace specline
