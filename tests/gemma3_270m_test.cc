// Gemma 3 270M (Q4_K_M GGUF, 262k SentencePiece vocabulary, sliding-window
// layers): the config read from the file, tokenization and greedy
// continuations of raw prompts (a base model: no chat template) against
// transformers run on the same dequantized weights (goldens from
// scripts/reference/gemma3_golden.py). Speculation's greedy identity on it
// is in scheduler_gemma3_test. Skips when scripts/setup.sh has not fetched
// the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernels/cpu/ops.h"
#include "model/runtime/generator.h"
#include "model/tokenizer/model_tokenizer.h"
#include "tests/test_util.h"

namespace specline {
namespace {

using nlohmann::json;

class Gemma3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::Gemma3Path();
    if (path.empty()) return;
    model_ = OpenModel(path).release();
    tokenizer_ = OpenTokenizerFor(*model_).release();
    golden_ = new json(json::parse(
        testing::ReadFile(testing::SourcePath("tests/data/golden/gemma3_270m.json"))));
  }
  void SetUp() override {
    if (model_ == nullptr) {
      GTEST_SKIP() << "Gemma 3 270M is not in the model cache (run scripts/setup.sh)";
    }
    // The reference runs fp32 activations; the default int8 path is checked
    // by the speculation test (identity holds on either).
    kernels::SetQuantizedActivations(false);
  }
  void TearDown() override { kernels::SetQuantizedActivations(true); }
  static ModelSource* model_;
  static Tokenizer* tokenizer_;
  static json* golden_;
};
ModelSource* Gemma3Test::model_ = nullptr;
Tokenizer* Gemma3Test::tokenizer_ = nullptr;
json* Gemma3Test::golden_ = nullptr;

TEST_F(Gemma3Test, ConfigIsGemma3_270M) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layers, 18);
  EXPECT_EQ(c.dim, 640);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.swa_pattern, 6);
  EXPECT_EQ(c.rope_theta, 1000000.0f);
  EXPECT_EQ(c.rope_theta_local, 10000.0f);
  EXPECT_TRUE(c.tied_embeddings && c.qk_norm && c.post_norms && c.gelu_mlp && c.scale_embeddings);
  EXPECT_EQ(c.final_softcap, 0.0f);
  EXPECT_FALSE(c.IsSlidingLayer(5));
  EXPECT_TRUE(c.IsSlidingLayer(6));
  EXPECT_EQ(model_->Require("model.layers.0.pre_feedforward_layernorm.weight").shape[0], 640);
}

TEST_F(Gemma3Test, TokensMatchTheReference) {
  for (const json& p : (*golden_)["prompts"]) {
    const std::string text = p["text"];
    EXPECT_EQ(tokenizer_->Encode(text, /*add_bos=*/true, /*parse_special=*/false),
              p["prompt_ids"].get<std::vector<int32_t>>())
        << p["name"];
    // Decoding the ids gives the text back (the vocabulary's byte pieces and
    // runs of spaces/newlines included).
    const auto ids = p["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->Decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), text)
        << p["name"];
  }
}

// llama.cpp's own tokenization (llama-server /tokenize, add_special, no
// special parsing) of the golden prompts and of text with runs of spaces and
// newlines, a tab, HTML, and user-defined / control piece spellings
// (tests/data/golden/gemma3_270m_llamacpp_tokens.json).
TEST_F(Gemma3Test, TokensMatchLlamaCpp) {
  const json peer = json::parse(testing::ReadFile(
      testing::SourcePath("tests/data/golden/gemma3_270m_llamacpp_tokens.json")));
  ASSERT_GE(peer.size(), 8u);
  for (const json& p : peer) {
    const std::string text = p["text"];
    EXPECT_EQ(tokenizer_->Encode(text, /*add_bos=*/true, /*parse_special=*/false),
              p["ids"].get<std::vector<int32_t>>())
        << text;
  }
}

TEST_F(Gemma3Test, GreedyContinuationsMatchTheReference) {
  LocalPipeline p(*model_, {0, model_->config().n_layers}, {.kv_capacity_tokens = 512}, 2);
  GenerationOptions opt;
  opt.max_tokens = (*golden_)["max_new_tokens"].get<int>();
  for (const json& g : (*golden_)["prompts"]) {
    const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = g["generated_ids"].get<std::vector<int32_t>>();
    const auto margin = g["top2_margin"].get<std::vector<double>>();
    auto r = Generate(p, 1, prompt, opt);
    ASSERT_TRUE(r.ok()) << r.status();
    // Token for token, except where the reference's top two are within 0.01
    // (a summation order can flip a near-tie); then they agree up to there.
    size_t i = 0;
    while (i < want.size() && i < r->tokens.size() && r->tokens[i] == want[i]) ++i;
    if (i < want.size()) {
      EXPECT_LT(margin[i], 0.01) << g["name"] << ": diverged at step " << i
                                 << " where the reference margin is " << margin[i];
    }
    p.Release(1);
  }
}

TEST_F(Gemma3Test, FirstStepLogitsMatchTheReference) {
  LocalPipeline p(*model_, {0, 9, 18}, {.kv_capacity_tokens = 512}, 2);
  for (const json& g : (*golden_)["prompts"]) {
    const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<SlotRef> slots;
    for (size_t i = 0; i < prompt.size(); ++i) slots.push_back({2, int32_t(i)});
    SliceOutput out;
    ASSERT_TRUE(p.Forward(slots, prompt, {}, &out).ok());
    const int dim = model_->config().dim;
    std::vector<float> logits = p.head().Logits(out.hidden.data() + (prompt.size() - 1) * dim, 1);
    p.Release(2);
    const json& top = g["first_step_top10"];
    for (size_t k = 0; k < top["ids"].size(); ++k) {
      const int32_t id = top["ids"][k];
      EXPECT_NEAR(logits[id], top["logits"][k].get<double>(), 2e-2)
          << g["name"] << " id " << id;
    }
  }
}

// How far the default int8 activations move Gemma 3 from fp32 activations
// (Gemma's residual stream has large outliers, which 8-bit blocks feel):
// top-1 agreement and KL(fp32 || int8) over the golden prompts and
// continuations, teacher forced (128 positions: the 262k-wide logits).
TEST_F(Gemma3Test, Int8ActivationsStayClose) {
  std::vector<int32_t> tokens;
  for (const json& g : (*golden_)["prompts"]) {
    for (int32_t t : g["prompt_ids"].get<std::vector<int32_t>>()) tokens.push_back(t);
    for (int32_t t : g["generated_ids"].get<std::vector<int32_t>>()) tokens.push_back(t);
  }
  tokens.resize(std::min<size_t>(tokens.size(), 128));
  auto all_logits = [&] {
    LocalPipeline p(*model_, {0, model_->config().n_layers}, {.kv_capacity_tokens = 512}, 2);
    std::vector<SlotRef> slots;
    for (size_t i = 0; i < tokens.size(); ++i) slots.push_back({1, int32_t(i)});
    SliceOutput out;
    EXPECT_TRUE(p.Forward(slots, tokens, {}, &out).ok());
    return p.head().Logits(out.hidden.data(), static_cast<int64_t>(tokens.size()));
  };
  const std::vector<float> fp32 = all_logits();
  kernels::SetQuantizedActivations(true);
  const std::vector<float> int8 = all_logits();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const testing::LogitRowsGap gap = testing::CompareLogitRows(fp32, int8, model_->config().vocab_size);
  const double top1 = gap.top1, kl_mean = gap.kl_mean;
  std::printf("int8 vs fp32 activations over %lld positions: top-1 agreement %.4f, "
              "KL mean %.5f max %.5f nats\n", static_cast<long long>(n), top1, kl_mean, gap.kl_max);
  EXPECT_GE(top1, 0.9);
  EXPECT_LT(kl_mean, 0.02);
}

}  // namespace
}  // namespace specline
