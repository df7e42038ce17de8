// Deterministic mutation fuzzing of the model loaders: small valid files of
// every format get random byte flips, overwritten length/count fields,
// truncations and appended garbage, and must then either open or raise
// ModelFormatError: never crash, hang, read out of bounds (run under
// AddressSanitizer in CI) or allocate absurdly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <filesystem>
#include <fstream>

#include "kernels/cpu/ops.h"
#include "model/formats/gguf.h"
#include "model/formats/gguf_writer.h"
#include "model/formats/random_model.h"
#include "tests/test_util.h"

namespace specline {
namespace {

namespace fs = std::filesystem;
using ::specline::testing::ReadFile;
using ::specline::testing::TempDir;

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n ? Next() % n : 0; }

 private:
  uint64_t s_;
};

ModelConfig TinyConfig() {
  ModelConfig c;
  c.arch = "llama";
  c.dim = 32;
  c.hidden_dim = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 16;
  c.vocab_size = 16;
  c.max_seq_len = 8;
  return c;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  // Unlink first: rewriting a file by truncation makes ext4 flush it to disk
  // on close (auto_da_alloc), which would dominate the run time.
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
}

// One random damage. Most land in the first `hot` bytes, where the headers,
// counts and offsets are; damage to tensor payloads is uninteresting.
std::string Mutate(const std::string& in, size_t hot, Rng& rng) {
  std::string s = in;
  if (s.empty()) return s;
  auto pos = [&] { return rng.Below(4) ? rng.Below(std::min(hot, s.size())) : rng.Below(s.size()); };
  switch (rng.Below(6)) {
    case 0:  // flip a few bits
      for (size_t i = 0, n = 1 + rng.Below(4); i < n; ++i) s[pos()] ^= 1 << rng.Below(8);
      break;
    case 1: {  // overwrite a little-endian integer with an extreme value
      static const uint64_t kValues[] = {0, 1, 7, 0xff, 0xffff, 0x7fffffff, 0xffffffff,
                                         0x100000000ull, 0x7fffffffffffffffull,
                                         0xffffffffffffffffull, 0x8000000000000000ull};
      uint64_t v = kValues[rng.Below(std::size(kValues))];
      size_t width = rng.Below(2) ? 4 : 8;
      size_t p = pos();
      std::memcpy(&s[p], &v, std::min(width, s.size() - p));
      break;
    }
    case 2:  // truncate
      s.resize(rng.Below(3) ? rng.Below(std::min(hot, s.size())) : rng.Below(s.size()));
      break;
    case 3:  // append garbage
      for (size_t i = 0, n = 1 + rng.Below(64); i < n; ++i) s.push_back(char(rng.Next()));
      break;
    case 4:  // random bytes over a span
      for (size_t p = pos(), n = 1 + rng.Below(16); n-- && p < s.size(); ++p) s[p] = char(rng.Next());
      break;
    default:  // delete a span (shifts every later field)
      s.erase(pos(), 1 + rng.Below(16));
      break;
  }
  return s;
}

// Opens `path`; reads every tensor byte so out-of-map pointers are caught.
// Returns whether it opened.
bool OpenAndTouch(const std::string& path) {
  try {
    auto src = OpenModel(path);
    uint64_t sum = 0;
    for (const TensorInfo* t : src->Tensors()) {
      const uint8_t* p = static_cast<const uint8_t*>(t->data);
      for (int64_t i = 0; i < t->nbytes; ++i) sum += p[i];
    }
    volatile uint64_t sink = sum;
    (void)sink;
    return true;
  } catch (const ModelFormatError&) {
    return false;
  }
}

struct Stats {
  int opened = 0;
  int rejected = 0;
};

// SPECLINE_FUZZ_SCALE=N runs N times as many iterations (longer local runs).
int Scale() {
  const char* s = std::getenv("SPECLINE_FUZZ_SCALE");
  return s && std::atoi(s) > 0 ? std::atoi(s) : 1;
}

void FuzzFile(const std::string& valid, size_t hot, int iterations, uint64_t seed,
              const std::string& path, const std::function<bool(const std::string&)>& open,
              Stats* stats) {
  Rng rng(seed);
  iterations *= Scale();
  for (int i = 0; i < iterations; ++i) {
    std::string bytes = Mutate(valid, hot, rng);
    if (rng.Below(3) == 0) bytes = Mutate(bytes, hot, rng);  // sometimes two
    WriteBytes(path, bytes);
    (open(path) ? stats->opened : stats->rejected)++;
  }
}

TEST(LoaderFuzz, Llama2c) {
  std::string dir = TempDir();
  WriteRandomModel(TinyConfig(), ModelFormat::kLlama2c, dir + "/m.bin", 1);
  std::string valid = ReadFile(dir + "/m.bin");
  ASSERT_TRUE(OpenAndTouch(dir + "/m.bin"));
  Stats st;
  FuzzFile(valid, 28, 600, 101, dir + "/f.bin", OpenAndTouch, &st);
  EXPECT_GT(st.rejected, 0);
}

TEST(LoaderFuzz, Gguf) {
  std::string dir = TempDir();
  Stats st;
  uint64_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kQ4_1, DType::kQ8_0, DType::kQ5_0}) {
    WriteRandomModel(TinyConfig(), ModelFormat::kGguf, dir + "/m.gguf", 1, dtype);
    std::string valid = ReadFile(dir + "/m.gguf");
    ASSERT_TRUE(OpenAndTouch(dir + "/m.gguf"));
    // The header and tensor directory are the first ~2.5 KB.
    FuzzFile(valid, 2600, 700, seed++, dir + "/f.gguf", OpenAndTouch, &st);
  }
  EXPECT_GT(st.rejected, 0);
}

// A model whose matrices are K-quants (rows of whole 256-element blocks).
TEST(LoaderFuzz, GgufKQuantModel) {
  ModelConfig c = TinyConfig();
  c.dim = 256;
  c.hidden_dim = 256;
  c.n_layers = 1;
  c.head_dim = 128;
  std::string dir = TempDir();
  Stats st;
  uint64_t seed = 250;
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K}) {
    WriteRandomModel(c, ModelFormat::kGguf, dir + "/m.gguf", 1, dtype);
    std::string valid = ReadFile(dir + "/m.gguf");
    ASSERT_TRUE(OpenAndTouch(dir + "/m.gguf"));
    FuzzFile(valid, 1500, 400, seed++, dir + "/f.gguf", OpenAndTouch, &st);
  }
  EXPECT_GT(st.rejected, 0);
}

// One small tensor of every quantized type, opened and every row decoded
// with DequantizeRow: damage that turns one type id into another, or
// changes a shape, must be caught by the size checks before any decoder
// reads past the data.
TEST(LoaderFuzz, GgufEveryQuantTypeDecoded) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(2 * 256);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (float& x : v) x = g(rng);
    w.AddTensorFromF32(std::string("t.") + std::string(DTypeName(t)), t, {2, 256}, v.data());
  }
  const std::string valid = w.Serialize();
  const std::string path = TempDir() + "/q.gguf";
  auto open = [](const std::string& p) {
    try {
      auto f = GgufFile::Open(p);
      for (const auto& [name, t] : f->tensors()) {
        if (t.shape.empty() || t.numel() == 0) continue;
        const int64_t cols = t.shape.back(), rows = t.numel() / cols;
        const int64_t row_bytes = *RowBytes(t.dtype, cols);
        std::vector<float> out(cols);
        for (int64_t r = 0; r < rows; ++r) {
          kernels::DequantizeRow(t.dtype, static_cast<const uint8_t*>(t.data) + r * row_bytes,
                                 cols, out.data());
        }
      }
      return true;
    } catch (const ModelFormatError&) {
      return false;
    }
  };
  ASSERT_TRUE(open((WriteBytes(path, valid), path)));
  Stats st;
  FuzzFile(valid, 1200, 1500, 600, path, open, &st);
  EXPECT_GT(st.rejected, 0);
  EXPECT_GT(st.opened, 0);
}

// Metadata-heavy GGUF (a vocabulary-like file with nested arrays, no model),
// through GgufFile::Open directly.
TEST(LoaderFuzz, GgufMetadata) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "bc", "\xe2\x96\x81"});
  w.SetF32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3});
  w.SetI32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1});
  GgufValue inner, outer;
  inner.v = std::make_shared<GgufValue::Array>(GgufValue::Array{{std::string("x")}, {std::string("yz")}});
  outer.v = std::make_shared<GgufValue::Array>(GgufValue::Array{inner, inner});
  w.Set("x.nested", {GgufType::kArray, GgufType::kArray, GgufType::kString}, outer);
  std::vector<float> v(64, 1.0f);
  w.AddTensorFromF32("t", DType::kQ4_0, {2, 32}, v.data());
  std::string valid = w.Serialize();
  std::string path = TempDir() + "/meta.gguf";
  Stats st;
  FuzzFile(valid, valid.size(), 800, 300, path,
           [](const std::string& p) {
             try {
               auto f = GgufFile::Open(p);
               for (const auto& [name, t] : f->tensors()) {
                 volatile uint8_t last = static_cast<const uint8_t*>(t.data)[t.nbytes - 1];
                 (void)last;
               }
               return true;
             } catch (const ModelFormatError&) {
               return false;
             }
           },
           &st);
  EXPECT_GT(st.rejected, 0);
}

TEST(LoaderFuzz, HuggingFace) {
  std::string dir = TempDir() + "/hf";
  WriteRandomModel(TinyConfig(), ModelFormat::kHuggingFace, dir, 1);
  ASSERT_TRUE(OpenAndTouch(dir));
  const std::string st_path = dir + "/model.safetensors";
  const std::string cfg_path = dir + "/config.json";
  const std::string valid_st = ReadFile(st_path);
  const std::string valid_cfg = ReadFile(cfg_path);
  uint64_t header_len;
  std::memcpy(&header_len, valid_st.data(), 8);
  Stats st;
  // Damage the safetensors header with a good config, then the config.
  FuzzFile(valid_st, 8 + header_len, 700, 400, st_path, OpenAndTouch, &st);
  WriteBytes(st_path, valid_st);
  FuzzFile(valid_cfg, valid_cfg.size(), 400, 500, cfg_path, OpenAndTouch, &st);
  EXPECT_GT(st.rejected, 0);
}

}  // namespace
}  // namespace specline
