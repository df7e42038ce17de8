// Gemma 3 270M through real stages (in-process, 2 stages): greedy
// speculation (RECYCLE, and SPD with the training-free drafter) gives
// exactly plain decoding's tokens on the 5 golden prompts, with the default
// int8 activations, and drafts are made. Skips without the model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "scheduler/policies/spd.h"
#include "tests/inproc_pipeline.h"
#include "tests/test_util.h"

namespace specline {
namespace {

using nlohmann::json;

// Greedy speculation equals plain decoding on the real model, through real
// stages (in-process), with the default int8 activations.
TEST(Gemma3Speculation, EqualsPlainDecoding) {
  if (testing::Gemma3Path().empty()) {
    GTEST_SKIP() << "Gemma 3 270M is not in the model cache (run scripts/setup.sh)";
  }
  const json golden = json::parse(
      testing::ReadFile(testing::SourcePath("tests/data/golden/gemma3_270m.json")));
  for (auto mode : {v1::DECODING_POLICY_RECYCLE, v1::DECODING_POLICY_SPD}) {
    scheduler::EngineOptions o;
    o.spec.policy = scheduler::DraftGate::kAlways;
    o.spec.Of<scheduler::SpdOptions>().drafter = "recycle";
    testing::InprocPipeline p(2, o, testing::InprocPipeline::kStageKvTokens,
                              std::chrono::microseconds(200), testing::Gemma3Path());
    int64_t drafted = 0;
    for (const json& g : golden["prompts"]) {
      scheduler::RequestOptions r;
      r.prompt = g["prompt_ids"].get<std::vector<int32_t>>();
      // A repeated prompt gives prompt lookup something to match.
      if (g["name"] == "list") r.prompt.insert(r.prompt.end(), r.prompt.begin() + 1, r.prompt.end());
      r.max_tokens = 24;
      const testing::Reference ref = testing::Generate1(p.model(), r);
      r.mode = mode;
      auto stream = p.engine().Submit(r);
      ASSERT_TRUE(stream.ok()) << stream.status();
      const testing::StreamResult got = testing::Collect(**stream);
      EXPECT_EQ(got.tokens, ref.tokens) << g["name"];
      drafted += got.last.spec.draft_tokens;
    }
    EXPECT_GT(drafted, 0) << "no drafts: the identity was not exercised";
    EXPECT_TRUE(testing::Eventually([&] { return p.StagesEmpty(); }));
  }
}

}  // namespace
}  // namespace specline
