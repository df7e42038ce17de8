// The logit processing every sampling path shares (ProcessLogits: logit_bias,
// a grammar's token mask, repetition, presence and frequency penalties), the
// distribution it leads to, and the logprobs reported from it: by hand, and
// against NumPy float64 goldens (scripts/reference/penalties_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "model/runtime/logprobs.h"
#include "model/runtime/ptp_coupling.h"
#include "model/runtime/sampler.h"
#include "tests/test_util.h"

namespace specline {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 3.0f, -1.0f, 0.5f}; }

std::vector<uint32_t> Mask(std::initializer_list<int32_t> ids, int32_t vocab) {
  std::vector<uint32_t> m((vocab + 31) / 32, 0);
  for (int32_t t : ids) m[t / 32] |= 1u << (t % 32);
  return m;
}

TEST(SamplerPenalties, PresenceAndFrequencyCountGeneratedTokensOnly) {
  // Prompt {1, 3}; generated {3, 5, 5, 5}: token 1 is only in the prompt.
  const std::vector<int32_t> history = {1, 3, 3, 5, 5, 5};
  SamplingParams p{.presence_penalty = 0.5f, .frequency_penalty = 0.25f};
  std::vector<float> z = Logits();
  ProcessLogits(z, p, {history, 2, {}});
  EXPECT_FLOAT_EQ(z[1], 3.0f);                 // prompt only: untouched
  EXPECT_FLOAT_EQ(z[3], 2.5f - 0.5f - 0.25f);  // once
  EXPECT_FLOAT_EQ(z[5], 3.0f - 0.5f - 0.75f);  // three times
  EXPECT_FLOAT_EQ(z[0], 1.0f);
  // Negative penalties encourage repeats.
  SamplingParams n{.presence_penalty = -1.0f, .frequency_penalty = -0.5f};
  z = Logits();
  ProcessLogits(z, n, {history, 2, {}});
  EXPECT_FLOAT_EQ(z[5], 3.0f + 1.0f + 1.5f);
}

TEST(SamplerPenalties, LogitBiasAddsAndMinus100Bans) {
  SamplingParams p{.logit_bias = {{2, 10.0f}, {5, -100.0f}}};
  std::vector<float> z = Logits();
  ProcessLogits(z, p, {});
  EXPECT_FLOAT_EQ(z[2], 8.0f);
  EXPECT_FLOAT_EQ(z[5], -97.0f);
  EXPECT_EQ(Warp(Logits(), p, {}).ids[0], 2);  // greedy follows the bias
  Rng rng(3);
  SamplingParams sampled = p;
  sampled.temperature = 1.0f;
  for (int i = 0; i < 200; ++i) EXPECT_NE(Sample(Logits(), sampled, {}, rng), 5);
}

TEST(SamplerPenalties, OrderIsBiasThenRepetitionThenPresence) {
  // Bias first: token 1 (3.0) biased to -1.0 is then multiplied by the
  // repetition penalty (negative logit), then the presence penalty comes off.
  SamplingParams p{.repetition_penalty = 2.0f, .presence_penalty = 0.5f, .logit_bias = {{1, -4.0f}}};
  const std::vector<int32_t> history = {0, 1};
  std::vector<float> z = Logits();
  ProcessLogits(z, p, {history, 1, {}});
  EXPECT_FLOAT_EQ(z[1], (3.0f - 4.0f) * 2.0f - 0.5f);
  EXPECT_FLOAT_EQ(z[0], 1.0f / 2.0f);  // prompt token: repetition only
}

TEST(SamplerPenalties, MaskRemovesTokensFromGreedyAndSampledDraws) {
  const std::vector<uint32_t> allowed = Mask({0, 4, 6}, 8);
  SamplingParams greedy;
  EXPECT_EQ(Sample(Logits(), greedy, {.allowed = allowed}, *std::make_unique<Rng>(1)), 0);
  TokenDistribution d = Warp(Logits(), SamplingParams{.temperature = 1.0f}, {.allowed = allowed});
  EXPECT_EQ(d.ids, (std::vector<int32_t>{0, 4, 6}));
  const double e0 = std::exp(1.0), e4 = 1.0, e6 = std::exp(-1.0);
  EXPECT_NEAR(d.Prob(0), e0 / (e0 + e4 + e6), 1e-6);
  EXPECT_NEAR(d.Prob(6), e6 / (e0 + e4 + e6), 1e-6);
  Rng rng(9);
  for (int i = 0; i < 300; ++i) {
    const int32_t t = Sample(Logits(), SamplingParams{.temperature = 2.0f}, {.allowed = allowed}, rng);
    EXPECT_TRUE(t == 0 || t == 4 || t == 6) << t;
  }
  // The mask is applied before the bias could revive a token.
  SamplingParams biased{.logit_bias = {{1, 50.0f}}};
  EXPECT_EQ(Warp(Logits(), biased, {.allowed = allowed}).ids[0], 0);
  // PTP's coupled sampling masks alike.
  EXPECT_EQ(CoupledSample(Logits(), biased, {.allowed = allowed}, 0.5), 0);
}

TEST(SamplerPenalties, MaskThatAllowsNothingThrows) {
  const std::vector<uint32_t> none(1, 0u);
  std::vector<float> z = Logits();
  EXPECT_THROW(ProcessLogits(z, {}, {.allowed = none}), std::invalid_argument);
}

TEST(SamplerPenalties, ArgmaxSufficesOnlyWhenNothingAltersTheRow) {
  EXPECT_TRUE(SamplingParams{}.ArgmaxSuffices());
  EXPECT_FALSE(SamplingParams{.temperature = 0.5f}.ArgmaxSuffices());
  EXPECT_FALSE(SamplingParams{.repetition_penalty = 1.1f}.ArgmaxSuffices());
  EXPECT_FALSE(SamplingParams{.presence_penalty = 0.1f}.ArgmaxSuffices());
  EXPECT_FALSE(SamplingParams{.frequency_penalty = -0.1f}.ArgmaxSuffices());
  EXPECT_FALSE((SamplingParams{.logit_bias = {{0, 1.0f}}}.ArgmaxSuffices()));
}

TEST(SamplerPenalties, ValidateRanges) {
  EXPECT_EQ(SamplingParams{.presence_penalty = 2.0f}.Validate(), "");
  EXPECT_NE(SamplingParams{.presence_penalty = 2.5f}.Validate(), "");
  EXPECT_NE(SamplingParams{.frequency_penalty = -2.01f}.Validate(), "");
  EXPECT_NE(SamplingParams{.frequency_penalty = std::nanf("")}.Validate(), "");
  EXPECT_EQ((SamplingParams{.logit_bias = {{3, -100.0f}, {7, 100.0f}}}.Validate(8)), "");
  EXPECT_NE((SamplingParams{.logit_bias = {{3, 100.5f}}}.Validate(8)), "");
  EXPECT_NE((SamplingParams{.logit_bias = {{8, 1.0f}}}.Validate(8)), "");   // out of the vocabulary
  EXPECT_NE((SamplingParams{.logit_bias = {{-1, 1.0f}}}.Validate()), "");
  EXPECT_NE((SamplingParams{.logit_bias = {{3, 1.0f}, {3, 2.0f}}}.Validate()), "");
  SamplingParams many;
  for (int32_t i = 0; i < 301; ++i) many.logit_bias.emplace_back(i, 1.0f);
  EXPECT_NE(many.Validate(), "");
  many.logit_bias.pop_back();
  EXPECT_EQ(many.Validate(), "");
}

TEST(Logprobs, AreTheLogSoftmaxOfTheProcessedRowAtTheTemperature) {
  SamplingParams p{.temperature = 0.5f, .top_k = 2, .presence_penalty = 1.0f};
  const std::vector<int32_t> history = {7, 1};
  const TokenLogprob lp = ComputeLogprobs(Logits(), p, {history, 1, {}}, 3, 3);
  // By hand: token 1 loses 1.0 (generated); logits / 0.5; before top-k.
  const std::vector<float> raw = Logits();
  std::vector<double> z(raw.begin(), raw.end());
  z[1] -= 1.0;
  double sum = 0;
  for (double v : z) sum += std::exp(v / 0.5);
  EXPECT_NEAR(lp.logprob, z[3] / 0.5 - std::log(sum), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 5);  // 3.0, untouched
  EXPECT_EQ(lp.top[1].first, 3);  // 2.5
  EXPECT_EQ(lp.top[2].first, 1);  // 2.0 after the penalty
  EXPECT_NEAR(lp.top[1].second, lp.logprob, 1e-6);
}

TEST(Logprobs, GreedyReportsTemperatureOneAndItsTopIsTheToken) {
  SamplingParams p{.frequency_penalty = 2.0f};
  const std::vector<int32_t> history = {5};
  const int32_t token = Sample(Logits(), p, {history, 0, {}}, *std::make_unique<Rng>(0));
  const TokenLogprob lp = ComputeLogprobs(Logits(), p, {history, 0, {}}, token, 1);
  ASSERT_EQ(lp.top.size(), 1u);
  EXPECT_EQ(lp.top[0].first, token);
  EXPECT_EQ(token, 1);  // 5 lost 2.0; 1 wins (3.0, lower id than nothing else)
  double sum = 0;
  for (float v : Logits()) sum += std::exp(v);
  sum += std::exp(1.0) - std::exp(3.0);  // token 5: 3.0 -> 1.0
  EXPECT_NEAR(lp.logprob, 3.0 - std::log(sum), 1e-5);
}

TEST(Logprobs, MaskedTokensAreNeverListed) {
  const std::vector<uint32_t> allowed = Mask({2, 6}, 8);
  const TokenLogprob lp = ComputeLogprobs(Logits(), {}, {.allowed = allowed}, 6, 5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 6);
  EXPECT_EQ(lp.top[1].first, 2);
  EXPECT_NEAR(std::exp(lp.top[0].second) + std::exp(lp.top[1].second), 1.0, 1e-6);
  EXPECT_EQ(ComputeLogprobs(Logits(), {}, {.allowed = allowed}, 1, 0).logprob,
            -std::numeric_limits<float>::infinity());
}

// Against the NumPy float64 reference.
struct GoldenCase {
  std::string name;
  std::vector<float> logits;
  std::vector<int32_t> history;
  int32_t prompt_len;
  SamplingParams params;
  std::vector<uint32_t> allowed;
  const nlohmann::json* j;
};

std::vector<GoldenCase> GoldenCases() {
  const nlohmann::json& g = testing::GoldenJson("tests/data/sampling/penalties_golden.json");
  const int32_t vocab = g.at("vocab").get<int32_t>();
  std::vector<GoldenCase> out;
  for (const nlohmann::json& c : g.at("cases")) {
    GoldenCase k;
    k.name = c.at("name").get<std::string>();
    k.logits = c.at("logits").get<std::vector<float>>();
    k.history = c.at("history").get<std::vector<int32_t>>();
    k.prompt_len = c.at("prompt_len").get<int32_t>();
    const nlohmann::json& s = c.at("settings");
    k.params.temperature = s.at("temperature").get<float>();
    k.params.top_k = s.at("top_k").get<int>();
    k.params.top_p = s.at("top_p").get<float>();
    k.params.min_p = s.at("min_p").get<float>();
    k.params.repetition_penalty = s.at("repetition_penalty").get<float>();
    k.params.presence_penalty = s.at("presence_penalty").get<float>();
    k.params.frequency_penalty = s.at("frequency_penalty").get<float>();
    for (const nlohmann::json& b : s.at("logit_bias")) {
      k.params.logit_bias.emplace_back(b.at(0).get<int32_t>(), b.at(1).get<float>());
    }
    if (!s.at("allowed").is_null()) {
      k.allowed.assign((vocab + 31) / 32, 0u);
      for (int32_t t : s.at("allowed").get<std::vector<int32_t>>()) k.allowed[t / 32] |= 1u << (t % 32);
    }
    k.j = &c;
    out.push_back(std::move(k));
  }
  return out;
}

TEST(SamplerPenaltiesGolden, ProcessedLogitsDistributionAndLogprobsMatchNumPy) {
  const std::vector<GoldenCase> cases = GoldenCases();
  ASSERT_EQ(cases.size(), 8u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.params.Validate(static_cast<int32_t>(c.logits.size())), "");
    const SamplingContext ctx{c.history, c.prompt_len, c.allowed};
    std::vector<float> z = c.logits;
    ProcessLogits(z, c.params, ctx);
    const nlohmann::json& processed = c.j->at("processed");
    const nlohmann::json& probs = c.j->at("probs");
    const nlohmann::json& logprobs = c.j->at("logprobs");
    const TokenDistribution d = Warp(c.logits, c.params, ctx);
    for (int32_t t = 0; t < static_cast<int32_t>(z.size()); ++t) {
      if (processed[t].is_null()) {
        EXPECT_EQ(z[t], -std::numeric_limits<float>::infinity()) << t;
        EXPECT_TRUE(logprobs[t].is_null());
      } else {
        EXPECT_NEAR(z[t], processed[t].get<double>(), 1e-5) << t;
      }
      EXPECT_NEAR(d.Prob(t), probs[t].get<double>(), 1e-6) << t;
      const TokenLogprob lp = ComputeLogprobs(c.logits, c.params, ctx, t, 0);
      if (!logprobs[t].is_null()) {
        EXPECT_NEAR(lp.logprob, logprobs[t].get<double>(), 1e-5) << t;
      }
    }
    // PTP's coupled sampling draws from the same distribution: at u, the
    // token whose vocabulary-order CDF bin (the golden one) holds u.
    double cdf = 0;
    for (int32_t t = 0; t < static_cast<int32_t>(z.size()); ++t) {
      const double lo = cdf;
      cdf += probs[t].get<double>();
      if (cdf - lo < 1e-4) continue;
      const double u = lo + (cdf - lo) / 2;
      EXPECT_EQ(CoupledSample(c.logits, c.params, ctx, u), t) << "u=" << u;
      EXPECT_EQ(d.InverseCdf(u), t) << "u=" << u;
    }
  }
}

}  // namespace
}  // namespace specline
