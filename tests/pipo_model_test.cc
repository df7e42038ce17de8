// PIPO on the CPU (PipoModel, PipoGenerate, BackbonePairwiseGenerate) against
// the Python reference's golden file (training/pipo_golden.py ->
// training/tests/data/pipo_golden.json, the trained stories260K head):
// padding, compressor, h_b and logits1 of the last prompt pair, the first
// greedy steps, full greedy outputs and streams at several tau; tau > 1
// equals the backbone's own pair-by-pair decoding (greedy and sampled); bad
// prompts and non-PIPO heads are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "model/drafters/pipo_model.h"
#include "model/formats/head_file.h"
#include "model/runtime/stage_slice.h"
#include "nlohmann/json.hpp"
#include "tests/pipo_reference.h"
#include "tests/test_util.h"

namespace specline {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

const json& Golden() { return testing::GoldenJson("training/tests/data/pipo_golden.json"); }

std::shared_ptr<kernels::ThreadPool> Pool() {
  static auto pool = std::make_shared<kernels::ThreadPool>(2);
  return pool;
}

// The golden's float tolerance (~1e-4 relative), with a floor for values
// near zero: the golden rounds to 6 decimals.
void ExpectClose(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-4 * std::fabs(want) + 2e-6) << what;
}

std::string BaseModelPath() { return testing::SharedModelPath("stories260K/stories260K.bin"); }

std::shared_ptr<const DraftHead> LoadHead(const std::string& name) {
  const ModelConfig base = OpenModel(BaseModelPath())->config();
  return LoadDraftHead(testing::SourcePath("training/heads/stories260K/" + name), base);
}

// One PipoModel for the whole file (its MTP cache is per sequence id).
PipoModel& Model() {
  static PipoModel model(LoadHead("pipo"), Pool());
  return model;
}

#define SKIP_WITHOUT_MODELS() \
  if (BaseModelPath().empty()) GTEST_SKIP() << "../shared/models/stories260K absent"

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

float Norm(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double{x[i]} * x[i];
  return static_cast<float>(std::sqrt(s));
}

TEST(PipoModel, PaddedPromptAndCompressor) {
  SKIP_WITHOUT_MODELS();
  PipoModel& m = Model();
  const json& g = Golden();
  EXPECT_EQ(m.pad_id(), g["pad_id"].get<int>());
  EXPECT_DOUBLE_EQ(m.tau_default(), 0.95);
  auto padded = m.PadPrompt(Ids(g["prompt"]));
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(*padded, Ids(g["padded_prompt"]));
  // An even prompt is unchanged.
  const std::vector<int32_t> even = Ids(g["greedy"]["even_prompt_tau_0.95"]["prompt"]);
  EXPECT_EQ(*m.PadPrompt(even), even);

  const int H = m.dim();
  for (const char* key : {"compressor_first_pair", "compressor_last_prompt_pair"}) {
    SCOPED_TRACE(key);
    const json& c = g[key];
    std::vector<float> z(H);
    m.Compress(c["tokens"][0].get<int32_t>(), c["tokens"][1].get<int32_t>(), z.data());
    for (int i = 0; i < 8; ++i) {
      ExpectClose(z[i], c["first8"][i].get<double>(), "z[" + std::to_string(i) + "]");
    }
    ExpectClose(Norm(z.data(), H), c["norm"].get<double>(), "norm");
  }
  // The batched form gives the same rows as one pair at a time.
  std::vector<float> all(padded->size() / 2 * H), one(H);
  m.CompressPairs(*padded, all.data());
  for (size_t k = 0; k < padded->size() / 2; ++k) {
    m.Compress((*padded)[2 * k], (*padded)[2 * k + 1], one.data());
    EXPECT_EQ(std::vector<float>(all.begin() + k * H, all.begin() + (k + 1) * H), one)
        << "pair " << k;
  }
}

// h_b of the last prompt pair from a backbone slice built here (as a stage
// would be), and its top-5 logits1.
TEST(PipoModel, BackboneOutputAndLogits1OfLastPromptPair) {
  SKIP_WITHOUT_MODELS();
  PipoModel& m = Model();
  const json& g = Golden()["h_b_last_prompt_pair"];
  const std::vector<int32_t> padded = Ids(Golden()["padded_prompt"]);
  const int H = m.dim(), V = m.vocab_size();
  const int n = static_cast<int>(padded.size() / 2);
  ASSERT_EQ(n - 1, g["pair_position"].get<int>());

  SliceOptions so;
  so.hidden_input = true;
  StageSlice backbone(*m.backbone(), 0, m.backbone()->config().n_layers, so, Pool());
  std::vector<float> z(n * H);
  m.CompressPairs(padded, z.data());
  std::vector<SlotRef> slots(n);
  for (int k = 0; k < n; ++k) slots[k] = {3, k};
  SliceInput in;
  in.slots = slots;
  in.hidden = z;
  SliceOutput out;
  ASSERT_TRUE(backbone.Forward(in, {}, &out).ok());
  const float* h = out.hidden.data() + (n - 1) * H;
  for (int i = 0; i < 8; ++i) {
    ExpectClose(h[i], g["first8"][i].get<double>(), "h_b[" + std::to_string(i) + "]");
  }
  ExpectClose(Norm(h, H), g["norm"].get<double>(), "norm");

  std::vector<float> l1(V);
  m.Logits1(h, 1, l1.data());
  EXPECT_EQ(l1[m.pad_id()], -INFINITY);
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l1[a] > l1[b]; });
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(order[k], g["logits1_top5"]["ids"][k].get<int>()) << "rank " << k;
    ExpectClose(l1[order[k]], g["logits1_top5"]["values"][k].get<double>(),
                "top " + std::to_string(k));
  }
}

TEST(PipoGenerate, FirstGreedyStepsMatchGolden) {
  SKIP_WITHOUT_MODELS();
  PipoGenerateOptions o;
  o.tau = 0.95;
  o.max_tokens = 64;
  auto r = PipoGenerate(Model(), Ids(Golden()["prompt"]), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const json& steps = Golden()["first_steps_tau_0.95"];
  ASSERT_GE(r->steps.size(), steps.size());
  for (size_t k = 0; k < steps.size(); ++k) {
    SCOPED_TRACE("step " + std::to_string(k));
    const json& w = steps[k];
    const PipoStepInfo& s = r->steps[k];
    EXPECT_EQ(s.pair_position, w["pair_position"].get<int>());
    EXPECT_EQ(s.t1, w["t1"].get<int>());
    EXPECT_EQ(s.t2, w["t2"].get<int>());
    ExpectClose(s.confidence, w["conf"].get<double>(), "confidence");
    EXPECT_EQ(s.accepted, w["accepted"].get<bool>());
    ExpectClose(s.logits1_max, w["logits1_max"].get<double>(), "logits1_max");
    ExpectClose(s.logits2_max, w["logits2_max"].get<double>(), "logits2_max");
  }
}

TEST(PipoGenerate, GreedyOutputsAndStreamsMatchGolden) {
  SKIP_WITHOUT_MODELS();
  for (const auto& [name, run] : Golden()["greedy"].items()) {
    SCOPED_TRACE(name);
    PipoGenerateOptions o;
    o.tau = run["tau"].get<double>();
    o.max_tokens = run["max_tokens"].get<int>();
    auto r = PipoGenerate(Model(), Ids(run["prompt"]), o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, Ids(run["tokens"]));
    EXPECT_EQ(r->stream, Ids(run["stream"]));
    EXPECT_EQ(r->steps.size(), run["steps"].get<size_t>());
    const auto accepted = std::count_if(r->steps.begin(), r->steps.end(),
                                        [](const PipoStepInfo& s) { return s.accepted; });
    EXPECT_EQ(accepted, run["accepted"].get<int>());
    EXPECT_FALSE(r->stopped);
    EXPECT_EQ(std::count(r->tokens.begin(), r->tokens.end(), Model().pad_id()), 0);
    EXPECT_EQ(Model().MtpLength(o.seq_id), 0) << "the MTP cache is released";
  }
}

// tau > 1 never accepts: the output is the backbone's own decoding pair by
// pair, RNG draws included (one draw per t1, none for t2).
TEST(PipoGenerate, TauAboveOneEqualsBackbonePairwise) {
  SKIP_WITHOUT_MODELS();
  const json& g = Golden()["greedy"];
  for (const char* prompt_of : {"tau_0.95", "even_prompt_tau_0.95"}) {
    const std::vector<int32_t> prompt = Ids(g[prompt_of]["prompt"]);
    for (float temperature : {0.0f, 0.8f, 1.5f}) {
      for (uint64_t seed : {1u, 7u}) {
        SCOPED_TRACE(std::string(prompt_of) + " T=" + std::to_string(temperature) +
                     " seed=" + std::to_string(seed));
        PipoGenerateOptions o;
        o.tau = 1.01;
        o.max_tokens = 40;
        o.temperature = temperature;
        o.seed = seed;
        auto pipo = PipoGenerate(Model(), prompt, o);
        auto pairwise = BackbonePairwiseGenerate(Model(), prompt, o);
        ASSERT_TRUE(pipo.ok()) << pipo.status();
        ASSERT_TRUE(pairwise.ok()) << pairwise.status();
        EXPECT_EQ(pipo->tokens, *pairwise);
        EXPECT_EQ(pipo->tokens.size(), 40u);
        for (const PipoStepInfo& s : pipo->steps) EXPECT_FALSE(s.accepted);
      }
    }
  }
  // And the golden's never-accept run is that decoding too.
  PipoGenerateOptions o;
  o.max_tokens = 64;
  auto pairwise = BackbonePairwiseGenerate(Model(), Ids(g["tau_1.01"]["prompt"]), o);
  ASSERT_TRUE(pairwise.ok());
  EXPECT_EQ(*pairwise, Ids(g["tau_1.01"]["tokens"]));
}

// Sampling at tau < 1 differs from the backbone alone (the MTP's tokens get
// committed) but is reproducible per seed and never emits PAD.
TEST(PipoGenerate, SampledIsDeterministicPerSeedAndPadFree) {
  SKIP_WITHOUT_MODELS();
  PipoGenerateOptions o;
  o.tau = 0.5;
  o.max_tokens = 48;
  o.temperature = 1.0f;
  o.seed = 3;
  const std::vector<int32_t> prompt = Ids(Golden()["prompt"]);
  auto a = PipoGenerate(Model(), prompt, o);
  auto b = PipoGenerate(Model(), prompt, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens.size(), 48u);
  EXPECT_EQ(std::count(a->tokens.begin(), a->tokens.end(), Model().pad_id()), 0);
  EXPECT_LT(a->steps.size(), 48u) << "some second tokens were committed";
}

TEST(PipoGenerate, StopsAtTheFirstEmittedStopId) {
  SKIP_WITHOUT_MODELS();
  const json& run = Golden()["greedy"]["tau_0.95"];
  const std::vector<int32_t> full = Ids(run["tokens"]);
  // Stop at the second token (an accepted t2: step 0 was accepted) and at
  // the third (a t1).
  for (size_t at : {1u, 2u}) {
    SCOPED_TRACE(at);
    const size_t first = std::find(full.begin(), full.end(), full[at]) - full.begin();
    PipoGenerateOptions o;
    o.tau = 0.95;
    o.max_tokens = 64;
    o.stop_ids = {full[at]};
    auto r = PipoGenerate(Model(), Ids(run["prompt"]), o);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->stopped);
    EXPECT_EQ(r->tokens, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  }
}

TEST(PipoGenerate, BadPromptsAreRefusedClearly) {
  SKIP_WITHOUT_MODELS();
  PipoModel& m = Model();
  const std::vector<int32_t> empty, with_pad = {1, 403, m.pad_id(), 407};
  auto e = m.PadPrompt(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("empty prompt"));
  auto p = m.PadPrompt(with_pad);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("PAD id 0 at position 2"));
  EXPECT_FALSE(m.PadPrompt(std::vector<int32_t>{1, 512}).ok()) << "outside the vocabulary";

  PipoGenerateOptions o;
  for (const auto* prompt : {&empty, &with_pad}) {
    auto g = PipoGenerate(m, *prompt, o);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    auto b = BackbonePairwiseGenerate(m, *prompt, o);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  }
  o.max_tokens = -1;
  EXPECT_FALSE(PipoGenerate(m, std::vector<int32_t>{1, 403}, o).ok());
}

TEST(PipoModel, RefusesNonPipoHeads) {
  SKIP_WITHOUT_MODELS();
  try {
    PipoModel m(LoadHead("ptp"), Pool());
    FAIL() << "a PTP head was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("ptp head is not a PIPO head"));
  }
  EXPECT_THROW(PipoModel(nullptr, Pool()), std::invalid_argument);
}

// The MTP call: per-row confidences of a multi-row call equal one row at a
// time; last_logits2 is the last row's; a gap or a bad token changes nothing.
TEST(PipoModel, MtpRowsAndErrors) {
  SKIP_WITHOUT_MODELS();
  PipoModel& m = Model();
  const int H = m.dim(), V = m.vocab_size();
  const std::vector<int32_t> token1 = {403, 261, 432, 286};
  std::vector<float> h_b(token1.size() * H);
  for (size_t i = 0; i < h_b.size(); ++i) h_b[i] = std::sin(0.37f * i) * 3.0f;

  std::vector<float> conf(4), l2(V);
  ASSERT_TRUE(m.Mtp(11, 0, token1, h_b, l2.data(), conf.data()).ok());
  EXPECT_EQ(m.MtpLength(11), 4);
  EXPECT_EQ(l2[m.pad_id()], -INFINITY);
  std::vector<float> one_l2(V);
  for (int k = 0; k < 4; ++k) {
    float c = 0;
    ASSERT_TRUE(m.Mtp(12, k, std::span(token1).subspan(k, 1), std::span(h_b).subspan(k * H, H),
                      one_l2.data(), &c).ok());
    EXPECT_FLOAT_EQ(c, conf[k]) << "row " << k;
    EXPECT_GT(c, 0.0f);
    EXPECT_LE(c, 1.0f);
  }
  EXPECT_EQ(one_l2, l2);
  // Rerunning the last row (implicit rollback) gives the same result.
  float again = 0;
  ASSERT_TRUE(m.Mtp(11, 3, std::span(token1).subspan(3, 1), std::span(h_b).subspan(3 * H, H),
                    nullptr, &again).ok());
  EXPECT_FLOAT_EQ(again, conf[3]);

  // Errors: gap, bad token, size mismatch, no rows; the cache stays.
  const std::vector<int32_t> bad = {V};
  EXPECT_EQ(
      m.Mtp(11, 6, std::span(token1).first(1), std::span(h_b).first(H), nullptr, nullptr).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Mtp(11, 4, bad, std::span(h_b).first(H), nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Mtp(11, 4, token1, std::span(h_b).first(H), nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Mtp(11, 4, {}, {}, nullptr, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.MtpLength(11), 4);
  m.Release(11);
  m.Release(12);
  EXPECT_EQ(m.MtpLength(11), 0);
}

}  // namespace
}  // namespace specline
