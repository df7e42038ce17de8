// Penalties, logit_bias and logprobs through the engine, in-process:
//   - greedy identity: with presence, frequency and repetition penalties and
//     a logit_bias, every policy gives exactly plain decoding's tokens
//     (Generate, model/runtime/generator.cc, which processes rows alike);
//   - logprobs: top-1 is the greedy token, the values are the log-softmax
//     of the model's row (a reference computed here from a local forward
//     pass), and speculative policies report the target's logprobs for the
//     drafts they accept: the same as autoregressive decoding's, token for
//     token.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "model/runtime/logprobs.h"
#include "scheduler/policies/ptp.h"
#include "tests/inproc_pipeline.h"
#include "tests/spec_heads.h"

namespace specline::testing {
namespace {

constexpr int kStageKv = InprocPipeline::kStageKvTokens;
constexpr auto kStageDelay = std::chrono::microseconds(400);
constexpr int kTokens = 20;

struct PolicyCase {
  std::string name;
  int n_stages;
  v1::DecodingPolicy mode;
  bool oracle;  // the oracle drafter (alpha 0.7) proposes the reference
};

void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.name; }

scheduler::EngineOptions Options(const PolicyCase& c) {
  scheduler::EngineOptions o;
  o.spec.policy = scheduler::DraftGate::kAlways;
  o.spec.allow_oracle = true;
  if (c.mode == v1::DECODING_POLICY_PTP) {
    o.spec.Of<scheduler::PtpOptions>().head = HeadDir("ptp", c.n_stages);
  }
  return o;
}

scheduler::RequestOptions Request(uint32_t prompt_seed) {
  scheduler::RequestOptions r;
  r.prompt = MakePrompt(4 + prompt_seed % 5, prompt_seed);
  r.max_tokens = kTokens;
  return r;
}

// Penalties strong enough to change the greedy output, and a bias that bans
// the plain output's first token and favours its sixth. `encourage`:
// negative presence and frequency penalties, which make the output repeat
// itself (so Token Recycling's drafts are accepted too).
SamplingParams Penalised(const std::vector<int32_t>& plain, bool encourage) {
  SamplingParams s;
  s.repetition_penalty = encourage ? 1.0f : 1.1f;
  s.presence_penalty = encourage ? -1.0f : 0.8f;
  s.frequency_penalty = encourage ? -0.5f : 0.6f;
  std::map<int32_t, float> bias = {{plain[0], -100.0f}, {plain[5], 3.0f}};
  s.logit_bias.assign(bias.begin(), bias.end());
  return s;
}

StreamResult RunRequest(InprocPipeline& p, scheduler::RequestOptions spec) {
  auto stream = p.engine().Submit(std::move(spec));
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return {};
  return Collect(**stream);
}

class PenalisedGreedy : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(PenalisedGreedy, EqualsPlainDecodingAndReportsTheTargetsLogprobs) {
  const PolicyCase c = GetParam();
  InprocPipeline p(c.n_stages, Options(c), kStageKv, kStageDelay);
  int64_t accepted = 0;
  for (uint32_t prompt : {1u, 2u, 3u}) {
    scheduler::RequestOptions spec = Request(prompt);
    const std::vector<int32_t> plain = Generate1(p.model(), spec).tokens;
    ASSERT_EQ(plain.size(), static_cast<size_t>(kTokens));
    spec.sampling = Penalised(plain, /*encourage=*/prompt != 1);
    const Reference ref = Generate1(p.model(), spec);
    EXPECT_NE(ref.tokens, plain) << "the penalties changed nothing: the test tests nothing";
    EXPECT_NE(ref.tokens[0], plain[0]);  // banned

    // Autoregressive with logprobs: the reference logprobs.
    spec.top_logprobs = 3;
    const StreamResult ar = RunRequest(p, spec);
    EXPECT_EQ(ar.tokens, ref.tokens) << "prompt " << prompt;

    spec.mode = c.mode;
    if (c.oracle) spec.oracle = {true, 0.7, ref.tokens};
    const StreamResult got = RunRequest(p, spec);
    EXPECT_EQ(got.tokens, ref.tokens) << "prompt " << prompt;
    EXPECT_EQ(got.last.mode, c.mode);
    accepted += got.last.spec.accepted_tokens;
    ASSERT_EQ(got.logprobs.size(), got.tokens.size());
    ASSERT_EQ(ar.logprobs.size(), ar.tokens.size());
    for (size_t i = 0; i < got.tokens.size() && i < ar.tokens.size(); ++i) {
      const v1::TokenLogprob& a = ar.logprobs[i];
      const v1::TokenLogprob& b = got.logprobs[i];
      EXPECT_EQ(b.token_id(), got.tokens[i]);
      ASSERT_EQ(b.top_size(), 3);
      EXPECT_EQ(b.top(0).token_id(), got.tokens[i]) << "top-1 is the greedy token, at " << i;
      EXPECT_NEAR(b.logprob(), a.logprob(), 1e-4) << "token " << i;
      for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(b.top(k).token_id(), a.top(k).token_id()) << i;
        EXPECT_NEAR(b.top(k).logprob(), a.top(k).logprob(), 1e-4) << i;
      }
    }
  }
  if (c.mode != v1::DECODING_POLICY_AUTOREGRESSIVE && c.mode != v1::DECODING_POLICY_PTP) {
    EXPECT_GT(accepted, 0) << "no draft was accepted: the target's logprobs went untested";
  }
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PenalisedGreedy,
    ::testing::Values(PolicyCase{"autoregressive", 2, v1::DECODING_POLICY_AUTOREGRESSIVE, false},
                      PolicyCase{"ppsd_oracle", 2, v1::DECODING_POLICY_PPSD, true},
                      PolicyCase{"spd_oracle", 4, v1::DECODING_POLICY_SPD, true},
                      PolicyCase{"recycle", 2, v1::DECODING_POLICY_RECYCLE, false},
                      PolicyCase{"ptp_adapter", 2, v1::DECODING_POLICY_PTP, false}),
    [](const auto& info) { return info.param.name; });

// The engine's logprobs against a log-softmax of the row computed here: a
// forward pass of the whole sequence so far, in one process.
TEST(EngineLogprobs, AreTheLogSoftmaxOfTheModelsRow) {
  InprocPipeline p(2, {}, kStageKv);
  scheduler::RequestOptions spec = Request(7);
  spec.max_tokens = 6;
  spec.top_logprobs = 5;
  const StreamResult got = RunRequest(p, spec);
  ASSERT_EQ(got.tokens.size(), 6u);
  ASSERT_EQ(got.logprobs.size(), 6u);
  LocalPipeline local(p.model(), {0, p.model().config().n_layers}, SliceOptions{16, 4096}, 1);
  const int dim = p.model().config().dim;
  std::vector<int32_t> history = spec.prompt;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    std::vector<SlotRef> slots;
    for (int32_t k = 0; k < static_cast<int32_t>(history.size()); ++k) slots.push_back({100 + i, k});
    SliceOutput out;
    ASSERT_TRUE(local.Forward(slots, history, {}, &out).ok());
    std::vector<float> row(local.head().vocab_size());
    local.head().Logits(out.hidden.data() + (history.size() - 1) * dim, 1, row.data());
    local.Release(100 + i);
    double mx = -INFINITY, sum = 0;
    for (float v : row) mx = std::max<double>(mx, v);
    for (float v : row) sum += std::exp(v - mx);
    const double lse = mx + std::log(sum);
    const v1::TokenLogprob& lp = got.logprobs[i];
    EXPECT_EQ(lp.token_id(), got.tokens[i]);
    EXPECT_NEAR(lp.logprob(), row[got.tokens[i]] - lse, 1e-4) << i;
    ASSERT_EQ(lp.top_size(), 5);
    EXPECT_EQ(lp.top(0).token_id(), got.tokens[i]);  // greedy: the argmax
    for (int k = 0; k < 5; ++k) {
      EXPECT_NEAR(lp.top(k).logprob(), row[lp.top(k).token_id()] - lse, 1e-4) << i << " " << k;
      if (k > 0) {
        EXPECT_LE(lp.top(k).logprob(), lp.top(k - 1).logprob());
      }
    }
    history.push_back(got.tokens[i]);
  }
}

TEST(EngineLogprobs, SampledRequestsReportTheTemperedDistribution) {
  InprocPipeline p(1, {}, kStageKv);
  scheduler::RequestOptions spec = Request(8);
  spec.max_tokens = 4;
  spec.top_logprobs = 0;
  spec.sampling.temperature = 0.7f;
  spec.sampling.top_k = 3;  // truncation does not enter the logprobs
  spec.sampling.seed = 5;
  const StreamResult got = RunRequest(p, spec);
  ASSERT_EQ(got.logprobs.size(), got.tokens.size());
  LocalPipeline local(p.model(), {0, p.model().config().n_layers}, SliceOptions{16, 4096}, 1);
  const int dim = p.model().config().dim;
  std::vector<int32_t> history = spec.prompt;
  for (size_t i = 0; i < got.tokens.size(); ++i) {
    std::vector<SlotRef> slots;
    for (int32_t k = 0; k < static_cast<int32_t>(history.size()); ++k) slots.push_back({200 + i, k});
    SliceOutput out;
    ASSERT_TRUE(local.Forward(slots, history, {}, &out).ok());
    std::vector<float> row(local.head().vocab_size());
    local.head().Logits(out.hidden.data() + (history.size() - 1) * dim, 1, row.data());
    local.Release(200 + i);
    double mx = -INFINITY, sum = 0;
    for (float v : row) mx = std::max<double>(mx, v / 0.7);
    for (float v : row) sum += std::exp(v / 0.7 - mx);
    EXPECT_NEAR(got.logprobs[i].logprob(), row[got.tokens[i]] / 0.7 - mx - std::log(sum), 1e-4);
    EXPECT_EQ(got.logprobs[i].top_size(), 0);
    history.push_back(got.tokens[i]);
  }
}

TEST(EngineLogprobs, OutOfRangeSettingsAreRefused) {
  InprocPipeline p(1, {}, kStageKv);
  scheduler::RequestOptions spec = Request(1);
  spec.top_logprobs = 21;
  EXPECT_FALSE(p.engine().Submit(spec).ok());
  spec.top_logprobs = -1;
  spec.sampling.presence_penalty = 2.5f;
  EXPECT_FALSE(p.engine().Submit(spec).ok());
  spec.sampling.presence_penalty = 0;
  spec.sampling.logit_bias = {{p.model().config().vocab_size, 1.0f}};
  EXPECT_FALSE(p.engine().Submit(spec).ok());
}

}  // namespace
}  // namespace specline::testing
