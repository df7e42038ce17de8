// The runtime against Hugging Face transformers in float64 (goldens from
// scripts/reference/golden_logits.py, checked there against an independent
// NumPy implementation): prefill logits, step-by-step decode logits with the
// KV cache, hidden-state taps at every layer boundary, and greedy tokens, for
// Llama (GQA, tied, Llama 3 RoPE scaling), Qwen2 (qkv bias), Qwen3 (q/k
// norm, explicit head_dim), Gemma 2 (soft caps, query_pre_attn_scalar,
// alternating window-4 layers) and Gemma 3 (q/k norm, per-layer-type RoPE
// bases, a window shorter than the prompt).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/formats/random_model.h"
#include "model/runtime/generator.h"
#include "tests/test_util.h"

namespace specline {
namespace {

using nlohmann::json;

// fp32 runtime vs float64 reference: the reference scripts measured stock
// fp32 transformers within 4e-6 of these goldens.
constexpr float kTol = 1e-4f;

json Golden(const std::string& name) {
  return json::parse(testing::ReadFile(testing::SourcePath("tests/data/golden/" + name + ".json")));
}

void ExpectRowNear(const float* got, const json& want, const std::string& what) {
  ASSERT_TRUE(want.is_array());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i].get<double>(), kTol) << what << " [" << i << "]";
  }
}

class GoldenLogitsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // "name@gguf": the Hugging Face model converted to GGUF by our writer,
    // so the GGUF path is held to the same goldens.
    std::string name = GetParam();
    const bool gguf = name.ends_with("@gguf");
    if (gguf) name.resize(name.size() - 5);
    golden_ = Golden(name);
    model_ = OpenModel(testing::SourcePath(golden_["model_dir"].get<std::string>()));
    if (gguf) {
      const std::string path = testing::TempDir() + "/" + name + ".gguf";
      WriteModelAsGguf(*model_, path);
      model_ = OpenModel(path);
    }
    ids_ = golden_["input_ids"].get<std::vector<int32_t>>();
  }
  json golden_;
  std::unique_ptr<ModelSource> model_;
  std::vector<int32_t> ids_;
};

TEST_P(GoldenLogitsTest, PrefillLogitsAndTaps) {
  const ModelConfig& c = model_->config();
  ASSERT_EQ(c.n_layers, golden_["n_layers"].get<int>());
  ASSERT_EQ(c.vocab_size, golden_["vocab_size"].get<int>());
  LocalPipeline p(*model_, {0, c.n_layers}, {}, 2);
  std::vector<SlotRef> slots;
  for (size_t i = 0; i < ids_.size(); ++i) slots.push_back({1, int32_t(i)});
  std::vector<int> taps;
  for (int k = 0; k <= c.n_layers; ++k) taps.push_back(k);
  SliceOutput out;
  ASSERT_TRUE(p.Forward(slots, ids_, taps, &out).ok());
  std::vector<float> logits = p.head().Logits(out.hidden.data(), ids_.size());
  const json& want = golden_["prefill"]["logits"];
  ASSERT_EQ(want.size(), ids_.size());
  for (size_t i = 0; i < ids_.size(); ++i) {
    ExpectRowNear(logits.data() + i * c.vocab_size, want[i], "prefill position " + std::to_string(i));
  }
  const json& stream = golden_["hidden_states"]["residual_stream"];
  for (int k = 0; k <= c.n_layers; ++k) {
    for (size_t i = 0; i < ids_.size(); ++i) {
      ExpectRowNear(out.taps[k].hidden.data() + i * c.dim, stream[k][i],
                    "tap " + std::to_string(k) + " position " + std::to_string(i));
    }
  }
}

TEST_P(GoldenLogitsTest, StepDecodeWithKvCache) {
  const ModelConfig& c = model_->config();
  // Run as one slice per layer, so decode also crosses slice boundaries.
  LocalPipeline p(*model_, EvenSplit(c.n_layers, c.n_layers), {.kv_block_size = 2}, 2);
  const json& d = golden_["decode"];
  const int n = d["prefill_len"].get<int>();
  std::vector<SlotRef> slots;
  for (int i = 0; i < n; ++i) slots.push_back({9, i});
  SliceOutput out;
  ASSERT_TRUE(p.Forward(slots, std::span(ids_).first(n), {}, &out).ok());
  std::vector<float> logits = p.head().Logits(out.hidden.data() + (n - 1) * c.dim, 1);
  ExpectRowNear(logits.data(), d["prefill_last_logits"], "prefill last");
  const auto positions = d["step_positions"].get<std::vector<int32_t>>();
  const auto inputs = d["step_input_ids"].get<std::vector<int32_t>>();
  for (size_t s = 0; s < positions.size(); ++s) {
    SlotRef slot{9, positions[s]};
    ASSERT_TRUE(p.Forward({&slot, 1}, {&inputs[s], 1}, {}, &out).ok());
    logits = p.head().Logits(out.hidden.data(), 1);
    ExpectRowNear(logits.data(), d["step_logits"][s], "decode step " + std::to_string(s));
  }
}

TEST_P(GoldenLogitsTest, GreedyTokens) {
  const ModelConfig& c = model_->config();
  LocalPipeline p(*model_, {0, c.n_layers}, {}, 1);
  GenerationOptions opt;
  opt.max_tokens = golden_["greedy"]["max_new_tokens"].get<int>();
  auto r = Generate(p, 1, ids_, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, golden_["greedy"]["generated_ids"].get<std::vector<int32_t>>());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GoldenLogitsTest,
                         ::testing::Values("llama_gqa", "llama_tied", "llama3_scaled", "qwen2_bias",
                                           "qwen3_qknorm", "gemma2_softcap", "gemma3_swa"));

// Phi-3 (fused projections, LongRoPE short and long, partial rotary, tied)
// and the mixture-of-experts archs, from their Hugging Face files and as GGUF.
INSTANTIATE_TEST_SUITE_P(Phi3AndMoe, GoldenLogitsTest,
                         ::testing::Values("phi3_fused", "phi4_partial_longrope", "qwen3moe_tiny",
                                           "mixtral_tiny", "olmoe_tiny", "phi3_fused@gguf",
                                           "phi4_partial_longrope@gguf", "qwen3moe_tiny@gguf",
                                           "mixtral_tiny@gguf", "olmoe_tiny@gguf"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& ch : n) {
                             if (ch == '@') ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace specline
