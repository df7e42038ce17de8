// Phi-3 (fused qkv and gate/up, partial rotary, LongRoPE, tied embeddings) and
// mixture-of-experts models (qwen3moe, Mixtral, OLMoE): every file format
// holds the same model, stage splits and batches reproduce single runs bit
// for bit at every thread count, MoE reads only the routed experts, and
// malformed files fail with messages that name the problem. Numerical
// agreement with transformers is golden_logits_test's job.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "kernels/cpu/ops.h"
#include "model/formats/arch_tensors.h"
#include "model/formats/gguf_writer.h"
#include "model/formats/random_model.h"
#include "model/formats/random_model_arch.h"
#include "model/runtime/local_pipeline.h"
#include "model/runtime/moe_mlp.h"
#include "model/runtime/rope.h"
#include "tests/test_util.h"

namespace specline {
namespace {

// Small shapes of each arch; `variant` picks Phi-3's flavours.
ModelConfig ArchConfig(const std::string& arch, int variant = 0) {
  ModelConfig c = LlamaShape(64, 96, 3, 4, 2, 96, 128);
  c.arch = arch;
  if (arch == "phi3") {
    if (variant == 1) {
      // Phi-4-mini-like: partial rotary 0.75, LongRoPE in its long regime
      // (context 128 > original 32), tied embeddings.
      c.rope_dim = 12;
      c.longrope = RandomLongRope(12, 32, c.max_seq_len);
      c.tied_embeddings = true;
    } else if (variant == 2) {
      // LongRoPE in its short regime (context == original).
      c.longrope = RandomLongRope(16, 128, c.max_seq_len);
    }
    return c;
  }
  c.n_experts = arch == "olmoe" ? 6 : 4;
  c.n_experts_used = 2;
  c.expert_hidden_dim = arch == "qwen3moe" ? 32 : 96;
  c.moe_routing = arch == "olmoe" ? MoeRouting::kSoftmaxTopK : MoeRouting::kSoftmaxTopKRenorm;
  c.qk_norm = arch != "mixtral";
  c.qk_norm_full = arch == "olmoe";
  return c;
}

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 88, 23, 61, 9, 70, 33, 2, 14};

std::vector<float> Logits(LocalPipeline& p, uint64_t seq, int32_t start,
                          const std::vector<int32_t>& tokens) {
  std::vector<SlotRef> slots;
  for (size_t i = 0; i < tokens.size(); ++i) slots.push_back({seq, start + int32_t(i)});
  SliceOutput out;
  absl::Status st = p.Forward(slots, tokens, {}, &out);
  EXPECT_TRUE(st.ok()) << st;
  return p.head().Logits(out.hidden.data(), tokens.size());
}

std::string Write(const ModelConfig& c, ModelFormat f, const std::string& name,
                  DType t = DType::kF32) {
  const std::string path = testing::TempDir() + "/" + name;
  WriteRandomModel(c, f, path, /*seed=*/11, t);
  return path;
}

struct ArchCase {
  std::string arch;
  int variant;
};

std::string CaseName(const ::testing::TestParamInfo<ArchCase>& info) {
  return info.param.arch + std::to_string(info.param.variant);
}

class ArchTest : public ::testing::TestWithParam<ArchCase> {
 protected:
  ModelConfig Config() const { return ArchConfig(GetParam().arch, GetParam().variant); }
  std::string Name(const std::string& ext) const {
    return GetParam().arch + std::to_string(GetParam().variant) + ext;
  }
};

TEST_P(ArchTest, GgufAndHfHoldTheSameModel) {
  const ModelConfig c = Config();
  auto gguf = OpenModel(Write(c, ModelFormat::kGguf, Name(".gguf")));
  auto hf = OpenModel(Write(c, ModelFormat::kHuggingFace, Name("_hf")));
  for (const ModelSource* m : {gguf.get(), hf.get()}) {
    const ModelConfig& r = m->config();
    EXPECT_EQ(r.n_experts, c.n_experts);
    EXPECT_EQ(r.n_experts_used, c.n_experts_used);
    EXPECT_EQ(r.expert_hidden_dim, c.expert_hidden_dim);
    EXPECT_EQ(r.moe_routing, c.moe_routing);
    EXPECT_EQ(r.RopeDim(), c.RopeDim());
    EXPECT_EQ(r.qk_norm_full, c.qk_norm_full);
    EXPECT_EQ(r.tied_embeddings, c.tied_embeddings);
    ASSERT_EQ(r.longrope.has_value(), c.longrope.has_value());
    if (c.longrope) {
      EXPECT_EQ(r.longrope->short_factors, c.longrope->short_factors);
      EXPECT_EQ(r.longrope->long_factors, c.longrope->long_factors);
      EXPECT_EQ(r.longrope->original_max_position, c.longrope->original_max_position);
      EXPECT_NEAR(r.longrope->attention_factor, c.longrope->attention_factor, 1e-6);
    }
  }
  // Mixtral is "llama" with experts to llama.cpp.
  EXPECT_EQ(gguf->config().arch, c.arch == "mixtral" ? "llama" : c.arch);
  LocalPipeline pg(*gguf, {0, c.n_layers}, {}, 2);
  LocalPipeline ph(*hf, {0, c.n_layers}, {}, 2);
  const std::vector<float> a = Logits(pg, 1, 0, kPrompt);
  const std::vector<float> b = Logits(ph, 1, 0, kPrompt);
  ASSERT_EQ(a.size(), b.size());
  float spread = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]));
    // GGUF "llama" pairs RoPE dims differently (interleaved): same math,
    // other summation order, so near rather than equal.
    ASSERT_NEAR(a[i], b[i], 2e-4f) << "logit " << i;
    spread = std::max(spread, std::fabs(a[i]));
  }
  EXPECT_GT(spread, 0.5f);  // logits that carry signal
}

TEST_P(ArchTest, EverySplitEqualsTheWholeModel) {
  const ModelConfig c = Config();
  auto model = OpenModel(Write(c, ModelFormat::kGguf, Name("_split.gguf")));
  LocalPipeline whole(*model, {0, 3}, {}, 2);
  const std::vector<float> ref = Logits(whole, 1, 0, kPrompt);
  for (const std::vector<int>& bounds :
       std::vector<std::vector<int>>{{0, 1, 3}, {0, 2, 3}, {0, 1, 2, 3}}) {
    LocalPipeline chained(*model, bounds, {}, 2);
    std::vector<int32_t> head(kPrompt.begin(), kPrompt.end() - 1);
    std::vector<float> got = Logits(chained, 1, 0, head);
    std::vector<float> last = Logits(chained, 1, int32_t(head.size()), {kPrompt.back()});
    got.insert(got.end(), last.begin(), last.end());
    ASSERT_EQ(got, ref) << bounds.size() - 1 << " slices";
  }
}

// A batched row equals its m = 1 call bit for bit at 1, 2 and 3 threads, for
// fp32 weights and for Q8_0 ones (the integer activation path).
TEST_P(ArchTest, BatchedRowsEqualSingleRowsAtEveryThreadCount) {
  const ModelConfig c = Config();
  for (DType t : {DType::kF32, DType::kQ8_0}) {
    auto model = OpenModel(
        Write(c, ModelFormat::kGguf, Name("_" + std::string(DTypeName(t)) + ".gguf"), t));
    std::vector<float> ref;
    for (int threads : {1, 2, 3}) {
      LocalPipeline batched(*model, {0, c.n_layers}, {}, threads);
      std::vector<float> b = Logits(batched, 1, 0, kPrompt);
      LocalPipeline single(*model, {0, c.n_layers}, {}, threads);
      std::vector<float> s;
      for (size_t i = 0; i < kPrompt.size(); ++i) {
        std::vector<float> one = Logits(single, 1, int32_t(i), {kPrompt[i]});
        s.insert(s.end(), one.begin(), one.end());
      }
      ASSERT_EQ(b, s) << DTypeName(t) << ", " << threads << " threads";
      if (ref.empty()) ref = b;
      ASSERT_EQ(b, ref) << DTypeName(t) << ", " << threads << " threads vs 1";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchTest,
                         ::testing::Values(ArchCase{"phi3", 0}, ArchCase{"phi3", 1},
                                           ArchCase{"phi3", 2}, ArchCase{"qwen3moe", 0},
                                           ArchCase{"mixtral", 0}, ArchCase{"olmoe", 0}),
                         CaseName);

TEST(RouteTopK, RenormalisesOnlyWhenAsked) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  int e[3];
  float w[3];
  RouteTopK(logits, 5, 3, MoeRouting::kSoftmaxTopK, e, w);
  // Ties go to the lower index; best first.
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);
  EXPECT_EQ(e[2], 4);
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / z, 1e-6);
  RouteTopK(logits, 5, 3, MoeRouting::kSoftmaxTopKRenorm, e, w);
  const double zk = 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / zk, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / zk, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

// The experts a row did not pick are never read: replacing their weights by
// NaN changes nothing, while poisoning a picked one does.
TEST(MoeMlp, ReadsOnlyTheRoutedExperts) {
  const ModelConfig c = ArchConfig("qwen3moe");
  auto model = OpenModel(Write(c, ModelFormat::kGguf, "moe_reads.gguf"));
  const LayerWeights w = LayerWeights::Load(*model, 1);
  kernels::ThreadPool pool(2);
  std::vector<float> x(3 * c.dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i));
  MoeMlp moe;
  std::vector<float> ref(x.size());
  moe.Forward(c, w, x.data(), 3, ref.data(), pool);
  const std::vector<int> read = moe.last_experts_read();
  ASSERT_FALSE(read.empty());
  ASSERT_LE(read.size(), size_t(c.n_experts));
  std::vector<float> nan(int64_t{c.dim} * c.expert_hidden_dim,
                         std::numeric_limits<float>::quiet_NaN());
  auto poisoned = [&](int e) {
    LayerWeights p = w;
    for (auto* m : {&p.e_gate[e], &p.e_up[e], &p.e_down[e]}) {
      m->dtype = DType::kF32;
      m->data = nan.data();
      m->row_bytes = m->cols * 4;
    }
    return p;
  };
  for (int e = 0; e < c.n_experts; ++e) {
    const bool picked = std::find(read.begin(), read.end(), e) != read.end();
    const LayerWeights p = poisoned(e);
    std::vector<float> got(x.size());
    moe.Forward(c, p, x.data(), 3, got.data(), pool);
    if (picked) {
      EXPECT_TRUE(std::isnan(got[0]) || std::isnan(got[c.dim]) || std::isnan(got[2 * c.dim]))
          << "expert " << e;
    } else {
      EXPECT_EQ(got, ref) << "expert " << e << " was read";
    }
  }
  // One row reads exactly n_experts_used experts.
  moe.Forward(c, w, x.data(), 1, ref.data(), pool);
  EXPECT_EQ(moe.last_experts_read().size(), size_t(c.n_experts_used));
}

// A Phi-3 head rotates only its first rope_dim dims; the rest pass through.
TEST(Rope, PartialRotaryLeavesTheTailAlone) {
  ModelConfig c = ArchConfig("phi3", 1);
  Rope rope(c);
  ASSERT_EQ(rope.rot_dim(), 12);
  std::vector<float> cs(c.head_dim / 2), sn(c.head_dim / 2);
  rope.Angles(7, cs.data(), sn.data());
  std::vector<float> head(c.head_dim);
  for (int i = 0; i < c.head_dim; ++i) head[i] = 1.0f + i;
  std::vector<float> orig = head;
  rope.Apply(head.data(), 1, cs.data(), sn.data());
  for (int i = 12; i < c.head_dim; ++i) EXPECT_EQ(head[i], orig[i]);
  EXPECT_NE(head[0], orig[0]);
  // Pair (0, 6) rotated by 7 * inv_freq[0] / long_factor[0], scaled by the
  // attention factor.
  const double a = 7.0 / c.longrope->long_factors[0];
  const double s = c.longrope->attention_factor;
  EXPECT_NEAR(head[0], s * (orig[0] * std::cos(a) - orig[6] * std::sin(a)), 1e-5);
}

// Damaged files: the messages name what is wrong.
std::string OpenError(const std::string& path) {
  try {
    OpenModel(path);
  } catch (const ModelFormatError& e) {
    return e.what();
  }
  return "";
}

TEST(Phi3MoeLoader, ClearErrors) {
  // A fused qkv that is too short for the heads.
  {
    ModelConfig c = ArchConfig("phi3");
    const std::string ok = Write(c, ModelFormat::kGguf, "phi3_ok.gguf");
    GgufWriter w;
    auto src = GgufFile::Open(ok);
    for (const auto& [key, value] : src->metadata()) w.Set(key, *src->TypeOf(key), value);
    w.SetU32("phi3.attention.head_count_kv", 4);
    for (const auto& [name, t] : src->tensors()) {
      w.AddTensor(name, t.dtype, t.shape, t.data, t.nbytes);
    }
    const std::string bad = testing::TempDir() + "/phi3_bad_qkv.gguf";
    w.Write(bad);
    const std::string e = OpenError(bad);
    EXPECT_NE(e.find("blk.0.attn_qkv.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("expected 192 rows"), std::string::npos) << e;
  }
  // An expert count that disagrees with the stacked tensors, and a missing
  // router.
  {
    ModelConfig c = ArchConfig("qwen3moe");
    const std::string ok = Write(c, ModelFormat::kGguf, "moe_ok.gguf");
    auto src = GgufFile::Open(ok);
    auto rewrite = [&](const std::string& out, uint32_t experts, const std::string& skip) {
      GgufWriter w;
      for (const auto& [key, value] : src->metadata()) w.Set(key, *src->TypeOf(key), value);
      w.SetU32("qwen3moe.expert_count", experts);
      for (const auto& [name, t] : src->tensors()) {
        if (name != skip) w.AddTensor(name, t.dtype, t.shape, t.data, t.nbytes);
      }
      const std::string path = testing::TempDir() + "/" + out;  // a new dir per call
      w.Write(path);
      return OpenError(path);
    };
    std::string e = rewrite("moe_count.gguf", 8, "");
    EXPECT_NE(e.find("stacks 4 experts, the model has 8"), std::string::npos) << e;
    e = rewrite("moe_router.gguf", 4, "blk.1.ffn_gate_inp.weight");
    EXPECT_NE(e.find("missing tensor 'model.layers.1.mlp.gate.weight'"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace specline
