// PIPO through the stage pipeline (docs/pipo.md): stages run the fine-tuned
// backbone on compressor rows at pair positions, the scheduler runs the
// compressor, the MTP layer and the confidence head. Checked against the
// single-process reference (PipoGenerate, itself checked against the Python
// golden in pipo_model_test.cc) token for token, greedy and sampled, on 1 to
// 5 stages next to plain requests; tau > 1 equals the backbone decoding pair
// by pair; PAD never reaches the client; misuse gets clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "scheduler/policies/pipo.h"
#include "tests/inproc_pipeline.h"
#include "tests/pipo_reference.h"
#include "tests/spec_heads.h"

namespace specline::testing {
namespace {

using v1::DecodingPolicy;

const nlohmann::json& Golden() { return GoldenJson("training/tests/data/pipo_golden.json"); }

std::string Stories() { return SharedModelPath("stories260K/stories260K.bin"); }
std::string PipoHead() { return SourcePath(Golden()["head"].get<std::string>()); }

scheduler::EngineOptions PipoOptions() {
  scheduler::EngineOptions o;
  o.spec.Of<scheduler::PipoOptions>().head = PipoHead();
  return o;
}

// The reference decoder (one process, its own PipoModel).
PipoGenerateResult Reference(const scheduler::RequestOptions& spec, double tau) {
  static PipoModel model(LoadDraftHead(PipoHead(), OpenModel(Stories())->config()),
                         std::make_shared<kernels::ThreadPool>(1));
  PipoGenerateOptions o;
  o.tau = tau;
  o.max_tokens = spec.max_tokens;
  o.temperature = spec.sampling.temperature;
  o.seed = spec.sampling.seed;
  o.stop_ids = spec.stop_ids;
  auto r = PipoGenerate(model, spec.prompt, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : PipoGenerateResult{};
}

scheduler::RequestOptions Pipo(std::vector<int32_t> prompt, int max_tokens, float tau,
                            float temperature = 0, uint64_t seed = 0) {
  scheduler::RequestOptions r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.mode = v1::DECODING_POLICY_PIPO;
  r.pipo_tau = tau;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

StreamResult RunPipo(InprocPipeline& p, const scheduler::RequestOptions& spec) {
  auto s = p.engine().Submit(spec);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? Collect(**s) : StreamResult{};
}

TEST(PipoEngine, GreedyEqualsTheReferenceAndTheGoldenOnEveryDepth) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  for (int stages : {1, 2, 5}) {
    InprocPipeline p(stages, PipoOptions(), InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), Stories());
    for (const auto& [name, g] : Golden()["greedy"].items()) {
      const auto spec = Pipo(g["prompt"].get<std::vector<int32_t>>(), g["max_tokens"].get<int>(),
                             g["tau"].get<float>());
      const StreamResult got = RunPipo(p, spec);
      EXPECT_EQ(got.tokens, g["tokens"].get<std::vector<int32_t>>()) << name << ", " << stages << " stages";
      EXPECT_EQ(got.last.mode, v1::DECODING_POLICY_PIPO);
      // One step per backbone pass; the second token kept `accepted` times.
      EXPECT_EQ(got.last.spec.drafts, g["steps"].get<int64_t>()) << name;
      EXPECT_EQ(got.last.spec.accepted_tokens, g["accepted"].get<int64_t>()) << name;
      EXPECT_EQ(std::count(got.tokens.begin(), got.tokens.end(), 0), 0) << "PAD emitted";
    }
    EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  }
}

// Sampled requests and plain ones at once: each PIPO request equals the
// reference with the same seed (the same draws: t1, then t2 only when
// kept), each plain one equals plain decoding of the base model.
TEST(PipoEngine, SampledAndMixedRequestsEqualTheirReferences) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  InprocPipeline p(2, PipoOptions(), InprocPipeline::kStageKvTokens, std::chrono::microseconds(0),
                   Stories());
  const std::vector<int32_t> base = Golden()["prompt"].get<std::vector<int32_t>>();
  struct Job {
    scheduler::RequestOptions spec;
    std::shared_ptr<scheduler::RequestStream> stream;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 10; ++i) {
    Job j;
    std::vector<int32_t> prompt(base.begin(), base.begin() + 3 + i);
    if (i % 3 == 2) {
      j.spec.prompt = prompt;
      j.spec.max_tokens = 20;
      j.spec.sampling.temperature = 0.9f;
      j.spec.sampling.seed = 50 + i;
    } else {
      j.spec = Pipo(prompt, 24 + i, i % 2 ? 0.5f : 0.95f, i % 4 ? 0.8f : 0.0f, 7 + i);
    }
    if (i == 4) j.spec.stop_ids = {Reference(j.spec, j.spec.pipo_tau).tokens[5]};
    auto s = p.engine().Submit(j.spec);
    ASSERT_TRUE(s.ok()) << s.status();
    j.stream = *std::move(s);
    jobs.push_back(std::move(j));
  }
  for (Job& j : jobs) {
    const StreamResult got = Collect(*j.stream);
    if (j.spec.mode == v1::DECODING_POLICY_PIPO) {
      const PipoGenerateResult want = Reference(j.spec, j.spec.pipo_tau);
      EXPECT_EQ(got.tokens, want.tokens) << "request " << j.stream->id();
      EXPECT_EQ(got.last.finish, want.stopped ? scheduler::FinishReason::kStop
                                              : scheduler::FinishReason::kLength);
    } else {
      EXPECT_EQ(got.tokens, Generate1(p.model(), j.spec).tokens) << "request " << j.stream->id();
    }
  }
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  const auto stats = p.engine().Stats();
  EXPECT_EQ(stats.kv_free_tokens, stats.kv_capacity_tokens);
}

// tau > 1 never keeps a second token: PIPO is then its own backbone decoding
// pair by pair (the "tau = 1" check; the confidence can round to
// exactly 1.0 in float, so the never-accept threshold is above 1).
TEST(PipoEngine, NeverAcceptingEqualsTheBackboneDecodingPairByPair) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  InprocPipeline p(2, PipoOptions(), InprocPipeline::kStageKvTokens, std::chrono::microseconds(0),
                   Stories());
  static PipoModel model(LoadDraftHead(PipoHead(), OpenModel(Stories())->config()),
                         std::make_shared<kernels::ThreadPool>(1));
  const std::vector<int32_t> base = Golden()["prompt"].get<std::vector<int32_t>>();
  for (float t : {0.0f, 1.0f}) {
    for (int len : {4, 7}) {
      const auto spec = Pipo({base.begin(), base.begin() + len}, 30, 1.01f, t, 11);
      PipoGenerateOptions o;
      o.tau = 1.01;
      o.max_tokens = spec.max_tokens;
      o.temperature = t;
      o.seed = spec.sampling.seed;
      auto want = BackbonePairwiseGenerate(model, spec.prompt, o);
      ASSERT_TRUE(want.ok()) << want.status();
      const StreamResult got = RunPipo(p, spec);
      EXPECT_EQ(got.tokens, *want) << "T " << t << " prompt " << len;
      EXPECT_EQ(got.last.spec.accepted_tokens, 0);
    }
  }
}

TEST(PipoEngine, MisuseIsRefusedWithWhatToFix) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  const std::vector<int32_t> prompt = {1, 403, 407};
  {
    InprocPipeline p(2, PipoOptions(), InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), Stories());
    auto with_pad = Pipo({1, 0, 407}, 8, 0.9f);
    EXPECT_EQ(p.engine().Submit(with_pad).status().code(), absl::StatusCode::kInvalidArgument);
    auto tau_elsewhere = Pipo(prompt, 8, 0.9f);
    tau_elsewhere.mode = v1::DECODING_POLICY_AUTOREGRESSIVE;
    EXPECT_EQ(p.engine().Submit(tau_elsewhere).status().code(), absl::StatusCode::kInvalidArgument);
    // The server's default threshold applies when the request names none.
    auto default_tau = Pipo(prompt, 16, -1);
    EXPECT_EQ(RunPipo(p, default_tau).tokens, Reference(default_tau, 0.95).tokens);
  }
  {
    InprocPipeline p(2, PipoOptions(), InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), Stories(), /*heads_on_stages=*/false);
    auto s = p.engine().Submit(Pipo(prompt, 8, 0.9f));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.status().message().find("hosts no weight set"), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find("--weight-set"), std::string::npos) << s.status();
  }
  {
    InprocPipeline p(2, scheduler::EngineOptions{}, InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), Stories());
    auto s = p.engine().Submit(Pipo(prompt, 8, 0.9f));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.status().message().find("--pipo-head"), std::string::npos) << s.status();
  }
}

}  // namespace
}  // namespace specline::testing
