// Gemma 2 / 3 on random models: the loaders (GGUF and Hugging Face give the
// same model bit for bit; key and tensor errors name what is wrong), the
// sliding-window attention kernel against a plain reference, stage splits,
// and the batched-row == single-row invariant at every thread count past
// the window (what greedy speculation relies on).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "kernels/cpu/attention.h"
#include "model/formats/gguf.h"
#include "model/formats/gguf_writer.h"
#include "model/formats/random_model.h"
#include "model/runtime/local_pipeline.h"

namespace specline {
namespace {

// A tiny Gemma: head_dim 16, GQA 2:1, window 24 (prompts below cross it).
ModelConfig TinyGemma(const std::string& arch, int layers = 6) {
  ModelConfig c = LlamaShape(64, 96, layers, 4, 2, 128, 512);
  c.arch = arch;
  c.head_dim = 16;
  ApplyGemmaArch(c);
  c.tied_embeddings = true;
  c.norm_eps = 1e-6f;
  c.sliding_window = 24;
  if (arch == "gemma2") {
    c.swa_pattern = 2;
    c.attn_softcap = 50.0f;
    c.final_softcap = 30.0f;
  } else {
    c.swa_pattern = 3;  // 2 local : 1 global, so a 6-layer model has both twice
    c.rope_theta = 1000000.0f;
    c.rope_theta_local = 10000.0f;
  }
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11 + salt) % vocab;
  return t;
}

// Logits of positions [start, start + n) of sequence `seq`, in one call.
std::vector<float> Forward(LocalPipeline& p, uint64_t seq, int32_t start,
                           std::span<const int32_t> tokens) {
  std::vector<SlotRef> slots;
  for (size_t i = 0; i < tokens.size(); ++i) slots.push_back({seq, start + int32_t(i)});
  SliceOutput out;
  absl::Status st = p.Forward(slots, tokens, {}, &out);
  EXPECT_TRUE(st.ok()) << st;
  return p.head().Logits(out.hidden.data(), tokens.size());
}

class GemmaArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GemmaArchTest, GgufAndHuggingFaceLoadTheSameModel) {
  const ModelConfig c = TinyGemma(GetParam());
  const std::string dir = testing::TempDir() + "/gemma_formats_" + GetParam();
  const std::string gguf = dir + ".gguf";
  WriteRandomModel(c, ModelFormat::kGguf, gguf, 7, DType::kF32);
  WriteRandomModel(c, ModelFormat::kHuggingFace, dir, 7, DType::kF32);
  auto a = OpenModel(gguf);
  auto b = OpenModel(dir);
  for (const ModelSource* m : {a.get(), b.get()}) {
    const ModelConfig& r = m->config();
    EXPECT_EQ(r.arch, c.arch);
    EXPECT_TRUE(r.scale_embeddings && r.gelu_mlp && r.post_norms && r.tied_embeddings);
    EXPECT_EQ(r.qk_norm, c.arch == "gemma3");
    EXPECT_EQ(r.rope_style, RopeStyle::kHalf);
    EXPECT_EQ(r.sliding_window, c.sliding_window);
    EXPECT_EQ(r.swa_pattern, c.swa_pattern);
    EXPECT_EQ(r.attn_softcap, c.attn_softcap);
    EXPECT_EQ(r.final_softcap, c.final_softcap);
    EXPECT_EQ(r.rope_theta, c.rope_theta);
    EXPECT_EQ(r.AttentionScale(), c.AttentionScale());
    for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(r.IsSlidingLayer(l), c.IsSlidingLayer(l));
  }
  // HF stores w, GGUF 1 + w, both added in fp32: the same bits at run time.
  const TensorInfo& na = a->Require("model.layers.1.pre_feedforward_layernorm.weight");
  const TensorInfo& nb = b->Require("model.layers.1.pre_feedforward_layernorm.weight");
  ASSERT_EQ(na.dtype, DType::kF32);
  ASSERT_EQ(nb.dtype, DType::kF32);
  EXPECT_EQ(0, std::memcmp(na.data, nb.data, na.nbytes));
  const float first = static_cast<const float*>(na.data)[0];
  EXPECT_GT(first, 0.85f);  // 1 +- 0.1: the shift was applied
  EXPECT_LT(first, 1.15f);

  const std::vector<int32_t> tokens = Tokens(40, c.vocab_size);
  LocalPipeline pa(*a, {0, c.n_layers}, {}, 2);
  LocalPipeline pb(*b, {0, c.n_layers}, {}, 2);
  const std::vector<float> la = Forward(pa, 1, 0, tokens);
  const std::vector<float> lb = Forward(pb, 1, 0, tokens);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
  if (c.final_softcap > 0) {
    for (float x : la) ASSERT_LE(std::fabs(x), c.final_softcap);
  }
}

// The window changes exactly the positions it should: with the window at
// least as long as the sequence, the model equals one with no window; past
// it, the sliding layers see fewer keys and the logits move.
TEST_P(GemmaArchTest, TheWindowMasksOnlyPastItsLength) {
  ModelConfig windowed = TinyGemma(GetParam());
  ModelConfig full = windowed;
  full.sliding_window = 1000;  // longer than anything below: no effect
  const std::string pw = testing::TempDir() + "/gemma_win_" + GetParam() + ".gguf";
  const std::string pf = testing::TempDir() + "/gemma_full_" + GetParam() + ".gguf";
  WriteRandomModel(windowed, ModelFormat::kGguf, pw, 9, DType::kF32);
  WriteRandomModel(full, ModelFormat::kGguf, pf, 9, DType::kF32);
  auto mw = OpenModel(pw);
  auto mf = OpenModel(pf);
  const std::vector<int32_t> tokens = Tokens(60, windowed.vocab_size);
  LocalPipeline a(*mw, {0, windowed.n_layers}, {}, 2);
  LocalPipeline b(*mf, {0, windowed.n_layers}, {}, 2);
  const std::vector<float> lw = Forward(a, 1, 0, tokens);
  const std::vector<float> lf = Forward(b, 1, 0, tokens);
  const size_t v = windowed.vocab_size;
  const size_t w = windowed.sliding_window;
  // Positions < window: identical bits.
  EXPECT_EQ(0, std::memcmp(lw.data(), lf.data(), w * v * sizeof(float)));
  // Positions past the window: different.
  bool differs = false;
  for (size_t i = (w + 4) * v; i < lw.size() && !differs; ++i) differs = lw[i] != lf[i];
  EXPECT_TRUE(differs) << "the sliding window had no effect";
}

// Every split of the layers into slices gives the single slice's logits, for
// a prompt longer than the window.
TEST_P(GemmaArchTest, StageSplitsEqualTheWholeModel) {
  const ModelConfig c = TinyGemma(GetParam());
  const std::string path = testing::TempDir() + "/gemma_split_" + GetParam() + ".gguf";
  WriteRandomModel(c, ModelFormat::kGguf, path, 11, DType::kQ8_0);
  auto model = OpenModel(path);
  const std::vector<int32_t> tokens = Tokens(50, c.vocab_size, 3);
  LocalPipeline whole(*model, {0, c.n_layers}, {}, 2);
  const std::vector<float> ref = Forward(whole, 1, 0, tokens);
  for (const std::vector<int>& bounds :
       std::vector<std::vector<int>>{{0, 1, 6}, {0, 2, 4, 6}, {0, 3, 6}, {0, 1, 2, 3, 4, 5, 6}}) {
    LocalPipeline chained(*model, bounds, {.kv_block_size = 8}, 2);
    // Prefill all but the last token, then decode it.
    std::vector<float> got =
        Forward(chained, 1, 0, std::span(tokens).first(tokens.size() - 1));
    const std::vector<float> last =
        Forward(chained, 1, tokens.size() - 1, std::span(tokens).last(1));
    got.insert(got.end(), last.begin(), last.end());
    ASSERT_EQ(got.size(), ref.size());
    ASSERT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)))
        << bounds.size() - 1 << " slices";
  }
}

// Past two attention segments and far past the window: a verification
// batch's rows equal single-token decodes and the same positions inside one
// long prefill, at every thread count and KV block size.
TEST_P(GemmaArchTest, BatchedRowsEqualSingleDecodesAtEveryThreadCount) {
  ModelConfig c = TinyGemma(GetParam(), 3);
  c.sliding_window = 300;  // crosses segment boundaries (256) as it slides
  c.max_seq_len = 1024;
  const std::string path = testing::TempDir() + "/gemma_long_" + GetParam() + ".gguf";
  WriteRandomModel(c, ModelFormat::kGguf, path, 5, DType::kF32);
  auto model = OpenModel(path);
  const int prompt_len = 700, draft = 8;
  const std::vector<int32_t> tokens = Tokens(prompt_len + draft, c.vocab_size);
  const SliceOptions opts{.kv_capacity_tokens = 1024};
  LocalPipeline ref_p(*model, {0, 3}, opts, 2);
  for (int32_t at = 0; at < prompt_len; at += 256) {
    Forward(ref_p, 1, at, std::span(tokens).subspan(at, std::min(256, prompt_len - at)));
  }
  const std::vector<float> ref = Forward(ref_p, 1, prompt_len, std::span(tokens).subspan(prompt_len, draft));
  const size_t v = c.vocab_size;
  for (int threads : {1, 2, 3}) {
    LocalPipeline p(*model, {0, 1, 3}, {.kv_block_size = 8, .kv_capacity_tokens = 1024}, threads);
    Forward(p, 1, 0, std::span(tokens).first(prompt_len));
    for (int i = 0; i < draft; ++i) {
      const std::vector<float> one = Forward(p, 1, prompt_len + i, std::span(tokens).subspan(prompt_len + i, 1));
      ASSERT_EQ(0, std::memcmp(one.data(), ref.data() + i * v, v * sizeof(float)))
          << "decode of draft position " << i << ", " << threads << " threads";
    }
    LocalPipeline whole(*model, {0, 3}, opts, threads);
    const std::vector<float> all = Forward(whole, 1, 0, tokens);
    ASSERT_EQ(0, std::memcmp(all.data() + prompt_len * v, ref.data(), draft * v * sizeof(float)))
        << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, GemmaArchTest, ::testing::Values("gemma2", "gemma3"));

// The kernel's window and soft cap against a plain two-pass softmax, with
// rows in one call at different positions (windows starting inside a chunk,
// at a segment boundary, and not at all), under every plan.
TEST(GemmaAttentionKernelTest, WindowAndSoftcapMatchAPlainReference) {
  const int n_heads = 4, n_kv = 2, hd = 16, bs = 8, max_pos = 600;
  const int64_t row = int64_t{n_kv} * hd;
  const int blocks = max_pos / bs + 1;
  std::vector<float> k(blocks * bs * row), v(k.size());
  uint64_t s = 1;
  auto rnd = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xffff) / 32768.0f - 1.0f;
  };
  for (float& x : k) x = rnd() * 2.0f;
  for (float& x : v) x = rnd();
  std::vector<int32_t> table(blocks);
  for (int b = 0; b < blocks; ++b) table[b] = blocks - 1 - b;  // not in order
  const kernels::PagedKvView view{k.data(), v.data(), bs * row, row, bs};
  const std::vector<int32_t> positions = {0, 5, 30, 255, 256, 300, 511, 512, 599};
  std::vector<kernels::AttentionRow> rows;
  for (int32_t p : positions) rows.push_back({table.data(), p});
  std::vector<float> q(rows.size() * n_heads * hd);
  for (float& x : q) x = rnd();
  kernels::ThreadPool pool(3);
  for (int window : {0, 1, 17, 256, 300}) {
    for (float cap : {0.0f, 2.0f}) {
      const kernels::AttentionShape shape{n_heads, n_kv, hd, 0.25f, window, cap};
      for (auto plan : {kernels::AttentionPlan::kPerTile, kernels::AttentionPlan::kSplitK}) {
        std::vector<float> out(q.size());
        kernels::PagedAttention(shape, view, rows, q.data(), out.data(), pool, plan);
        for (size_t r = 0; r < rows.size(); ++r) {
          const int32_t pos = positions[r];
          const int32_t lo = window > 0 ? std::max(0, pos - window + 1) : 0;
          for (int h = 0; h < n_heads; ++h) {
            const float* qh = q.data() + (r * n_heads + h) * hd;
            const int kvh = h / (n_heads / n_kv);
            std::vector<double> sc;
            double mx = -1e30;
            for (int32_t t = lo; t <= pos; ++t) {
              const float* kt = k.data() + table[t / bs] * bs * row + (t % bs) * row + kvh * hd;
              double d = 0;
              for (int i = 0; i < hd; ++i) d += double(qh[i]) * kt[i];
              d *= 0.25;
              if (cap > 0) d = cap * std::tanh(d / cap);
              sc.push_back(d);
              mx = std::max(mx, d);
            }
            double sum = 0;
            for (double& x : sc) sum += (x = std::exp(x - mx));
            for (int i = 0; i < hd; ++i) {
              double o = 0;
              for (int32_t t = lo; t <= pos; ++t) {
                o += sc[t - lo] * v[table[t / bs] * bs * row + (t % bs) * row + kvh * hd + i];
              }
              ASSERT_NEAR(out[(r * n_heads + h) * hd + i], o / sum, 2e-5)
                  << "pos " << pos << " window " << window << " cap " << cap;
            }
          }
        }
      }
    }
  }
}

// Loader errors name the key or tensor.
TEST(GemmaLoaderTest, ErrorsNameTheKeyOrTensor) {
  const ModelConfig c = TinyGemma("gemma3");
  const std::string path = testing::TempDir() + "/gemma_err.gguf";
  WriteRandomModel(c, ModelFormat::kGguf, path, 1, DType::kF32);
  auto file = GgufFile::Open(path);

  // Rewrites the file with one change to its metadata or tensors.
  auto rewrite = [&](const std::string& out, const std::string& drop_tensor,
                     const std::function<void(GgufWriter&)>& edit) {
    GgufWriter w;
    for (const auto& [key, value] : file->metadata()) w.Set(key, *file->TypeOf(key), value);
    edit(w);
    for (const auto& [name, t] : file->tensors()) {
      if (name == drop_tensor) continue;
      w.AddTensor(name, t.dtype, t.shape, t.data, t.nbytes);
    }
    w.Write(out);
  };
  const std::string missing = testing::TempDir() + "/gemma_missing.gguf";
  rewrite(missing, "blk.2.post_ffw_norm.weight", [](GgufWriter&) {});
  try {
    OpenModel(missing);
    FAIL() << "loaded a Gemma without a post-FFW norm";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("post_feedforward_layernorm"), std::string::npos)
        << e.what();
  }
  const std::string bad_pattern = testing::TempDir() + "/gemma_pattern.gguf";
  rewrite(bad_pattern, "", [](GgufWriter& w) {
    w.SetString("gemma3.attention.sliding_window_pattern", "six");
  });
  try {
    OpenModel(bad_pattern);
    FAIL() << "loaded a non-integer sliding_window_pattern";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("gemma3.attention.sliding_window_pattern"),
              std::string::npos)
        << e.what();
  }
  const std::string bad_cap = testing::TempDir() + "/gemma_cap.gguf";
  rewrite(bad_cap, "", [](GgufWriter& w) {
    w.SetString("gemma3.final_logit_softcapping", "thirty");
  });
  try {
    OpenModel(bad_cap);
    FAIL() << "loaded a non-numeric soft cap";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("gemma3.final_logit_softcapping"), std::string::npos)
        << e.what();
  }
}

// `specline make-random-model --arch gemma3` (and gemma2, as safetensors):
// the files load with the Gemma traits and the flags' numbers, and run.
TEST(GemmaCliTest, MakeRandomModelWritesGemmas) {
  const std::string specline = std::string(SPECLINE_BINARY_DIR) + "/specline";
  const std::string g3 = testing::TempDir() + "/cli_gemma3.gguf";
  const std::string g2 = testing::TempDir() + "/cli_gemma2";
  const std::string cmd3 = specline + " make-random-model --arch gemma3 --out " + g3 +
                           " --dim 64 --hidden-dim 128 --layers 6 --heads 4 --kv-heads 1"
                           " --head-dim 32 --vocab 256 --seq-len 256 --sliding-window 16 2>/dev/null";
  ASSERT_EQ(std::system(cmd3.c_str()), 0) << cmd3;
  const std::string cmd2 = specline + " make-random-model --arch gemma2 --format hf --out " + g2 +
                           " --dim 64 --hidden-dim 128 --layers 2 --heads 4 --vocab 256"
                           " --seq-len 256 2>/dev/null";
  ASSERT_EQ(std::system(cmd2.c_str()), 0) << cmd2;
  auto m3 = OpenModel(g3);
  const ModelConfig& c3 = m3->config();
  EXPECT_EQ(c3.arch, "gemma3");
  EXPECT_TRUE(c3.qk_norm && c3.post_norms && c3.gelu_mlp && c3.scale_embeddings && c3.tied_embeddings);
  EXPECT_EQ(c3.sliding_window, 16);
  EXPECT_EQ(c3.swa_pattern, 6);
  EXPECT_EQ(c3.rope_theta, 1000000.0f);
  EXPECT_EQ(c3.rope_theta_local, 10000.0f);
  EXPECT_TRUE(c3.IsSlidingLayer(0));
  EXPECT_FALSE(c3.IsSlidingLayer(5));
  auto m2 = OpenModel(g2);
  const ModelConfig& c2 = m2->config();
  EXPECT_EQ(c2.arch, "gemma2");
  EXPECT_EQ(c2.attn_softcap, 50.0f);
  EXPECT_EQ(c2.final_softcap, 30.0f);
  EXPECT_EQ(c2.swa_pattern, 2);
  for (const ModelSource* m : {m3.get(), m2.get()}) {
    LocalPipeline p(*m, {0, m->config().n_layers}, {}, 1);
    const std::vector<float> logits = Forward(p, 1, 0, Tokens(20, m->config().vocab_size));
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
  // A Gemma field on another arch is refused, not silently written.
  const std::string bad = specline + " make-random-model --arch llama --out " +
                          testing::TempDir() + "/bad.gguf --sliding-window 16 2>/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace specline
