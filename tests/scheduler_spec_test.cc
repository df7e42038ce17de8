// Pipeline speculation through real stages (in-process): PPSD and SPD with
// the oracle at several acceptance rates and with randomly initialised
// heads give exactly the tokens of plain decoding (greedy), and the
// speculation counters say what happened.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>

#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/recycle.h"
#include "scheduler/policies/spd.h"
#include "tests/inproc_pipeline.h"
#include "tests/spec_heads.h"

namespace specline::testing {
namespace {

using v1::DecodingPolicy;

// Stages slow enough that the driver always drafts behind a token before it
// comes back (see InprocPipeline): the tests below count drafts.
constexpr int kStageKv = InprocPipeline::kStageKvTokens;
constexpr auto kStageDelay = std::chrono::microseconds(400);

scheduler::EngineOptions SpecOptions(int n_stages, const std::string& ppsd_kind,
                                     const std::string& spd_kind) {
  scheduler::EngineOptions o;
  o.spec.policy = scheduler::DraftGate::kAlways;
  o.spec.allow_oracle = true;
  if (!ppsd_kind.empty()) o.spec.Of<scheduler::PpsdOptions>().head = HeadDir(ppsd_kind, n_stages);
  if (!spd_kind.empty()) o.spec.Of<scheduler::SpdOptions>().head = HeadDir(spd_kind, n_stages);
  return o;
}

scheduler::RequestOptions Greedy(uint32_t prompt_seed, int max_tokens) {
  scheduler::RequestOptions r;
  r.prompt = MakePrompt(3 + prompt_seed % 7, prompt_seed);
  r.max_tokens = max_tokens;
  return r;
}

StreamResult RunRequest(InprocPipeline& p, scheduler::RequestOptions spec) {
  auto stream = p.engine().Submit(std::move(spec));
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return {};
  return Collect(**stream);
}

struct OracleCase {
  int n_stages;
  v1::DecodingPolicy mode;
};

// gtest prints the case in ctest's log.
void PrintTo(const OracleCase& c, std::ostream* os) {
  *os << PolicyShortName(c.mode) << " on " << c.n_stages << " stages";
}

class OracleGreedy : public ::testing::TestWithParam<OracleCase> {};

TEST_P(OracleGreedy, EqualsPlainDecodingAtEveryAcceptanceRate) {
  const OracleCase c = GetParam();
  InprocPipeline p(c.n_stages, SpecOptions(c.n_stages, "", ""), kStageKv, kStageDelay);
  // Whether a given token got a draft depends on thread timing (did the
  // driver draft before the token's predecessor came back?), so drafts are
  // counted over the whole test, not asserted per request; so are the
  // drafts accepted at alpha 1.
  int64_t drafts = 0, accepted_at_alpha_1 = 0;
  for (double alpha : {0.0, 0.3, 0.7, 1.0}) {
    for (uint32_t prompt : {1u, 2u, 3u}) {
      scheduler::RequestOptions spec = Greedy(prompt, 24);
      const Reference ref = Generate1(p.model(), spec);
      spec.mode = c.mode;
      spec.oracle = {true, alpha, ref.tokens};
      const StreamResult got = RunRequest(p, spec);
      EXPECT_EQ(got.tokens, ref.tokens) << "alpha " << alpha << " prompt " << prompt;
      const scheduler::SpecStats& st = got.last.spec;
      EXPECT_EQ(got.last.mode, c.mode);
      drafts += st.draft_tokens;
      // Greedy verification accepts exactly the oracle's true proposals.
      if (alpha == 1.0) {
        EXPECT_EQ(st.rejected_tokens, 0);
      }
      if (alpha == 0.0) {
        EXPECT_EQ(st.accepted_tokens, 0);
      }
      // (How many are accepted also depends on whether the driver drafted
      // before the token came back: on a tiny model it often did not.)
      if (alpha == 1.0) accepted_at_alpha_1 += st.accepted_tokens;
      EXPECT_EQ(st.accepted_tokens + st.rejected_tokens + st.discarded_tokens, st.draft_tokens);
    }
  }
  EXPECT_GT(drafts, 0);
  EXPECT_GT(accepted_at_alpha_1, 0);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  const auto stats = p.engine().Stats();
  EXPECT_EQ(stats.kv_free_tokens, stats.kv_capacity_tokens);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, OracleGreedy,
                         ::testing::Values(OracleCase{2, v1::DECODING_POLICY_PPSD},
                                           OracleCase{2, v1::DECODING_POLICY_SPD},
                                           OracleCase{4, v1::DECODING_POLICY_PPSD},
                                           OracleCase{4, v1::DECODING_POLICY_SPD}),
                         [](const auto& info) {
                           return std::string(PolicyShortName(info.param.mode)) +
                                  std::to_string(info.param.n_stages) + "stages";
                         });

struct HeadCase {
  int n_stages;
  std::string ppsd, spd;
};

void PrintTo(const HeadCase& c, std::ostream* os) {
  *os << c.ppsd << c.spd << " head on " << c.n_stages << " stages";
}

class HeadGreedy : public ::testing::TestWithParam<HeadCase> {};

TEST_P(HeadGreedy, RandomHeadsEqualPlainDecoding) {
  const HeadCase c = GetParam();
  InprocPipeline p(c.n_stages, SpecOptions(c.n_stages, c.ppsd, c.spd), kStageKv, kStageDelay);
  const v1::DecodingPolicy mode = c.ppsd.empty() ? v1::DECODING_POLICY_SPD : v1::DECODING_POLICY_PPSD;
  int64_t drafts = 0;
  for (uint32_t prompt : {4u, 5u, 6u, 7u}) {
    scheduler::RequestOptions spec = Greedy(prompt, 20);
    const Reference ref = Generate1(p.model(), spec);
    spec.mode = mode;
    const StreamResult got = RunRequest(p, spec);
    EXPECT_EQ(got.tokens, ref.tokens) << "prompt " << prompt;
    drafts += got.last.spec.draft_tokens;
  }
  EXPECT_GT(drafts, 0);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

INSTANTIATE_TEST_SUITE_P(Heads, HeadGreedy,
                         ::testing::Values(HeadCase{2, "ppsd-norm", ""}, HeadCase{2, "ppsd-layer", ""},
                                           HeadCase{4, "ppsd-layer", ""}, HeadCase{2, "", "spd-v11"},
                                           HeadCase{2, "", "spd-v10"}, HeadCase{4, "", "spd-v11"},
                                           HeadCase{4, "", "spd-v10"}),
                         [](const auto& info) {
                           std::string name = info.param.ppsd + info.param.spd + "_" +
                                              std::to_string(info.param.n_stages) + "stages";
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(DraftGate, UnavailableModesAndOracleMisuseAreRefused) {
  scheduler::EngineOptions o;  // no heads, no oracle
  InprocPipeline p(2, o);
  scheduler::RequestOptions spec = Greedy(1, 4);
  spec.mode = v1::DECODING_POLICY_SPD;
  auto s = p.engine().Submit(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--spd-head"), std::string::npos) << s.status();
  spec.oracle = {true, 0.5, {}};
  s = p.engine().Submit(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--allow-oracle"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace specline::testing

namespace specline::testing {
namespace {

// A head that does not fit the deployment stops the scheduler at start-up
// with a message naming the head, instead of failing requests later.
TEST(DraftGate, HeadsThatDoNotFitAreRefusedAtStartUp) {
  auto model = OpenModel(SchedulerTestModel());
  auto make = [&](scheduler::EngineOptions o) {
    static int n = 0;
    auto inbox = transport::Listen("inproc://spec-startup-" + std::to_string(n++));
    EXPECT_TRUE(inbox.ok());
    std::vector<std::unique_ptr<scheduler::StageControl>> stages;
    for (int i = 0; i < 2; ++i) stages.push_back(scheduler::ConnectStageControl("127.0.0.1:1"));
    scheduler::Engine e(std::shared_ptr<const ModelSource>(model.get(), [](auto*) {}),
                        std::move(stages), *std::move(inbox), o);
  };
  scheduler::EngineOptions o;
  // Made for 4 stages, the pipeline has 2.
  o.spec.Of<scheduler::SpdOptions>().head = HeadDir("spd-v11", 4);
  try {
    make(o);
    ADD_FAILURE() << "an SPD module for 4 stages was accepted by a 2-stage pipeline";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("4 pipeline stages"), std::string::npos) << e.what();
  }
  o = {};
  o.spec.Of<scheduler::PpsdOptions>().head = HeadDir("spd-v11", 2);  // not a PPSD head
  EXPECT_THROW(make(o), std::invalid_argument);
  o = {};
  o.spec.default_mode = v1::DECODING_POLICY_SPD;  // no head for the default
  try {
    make(o);
    ADD_FAILURE() << "a default policy the deployment does not serve was accepted";
  } catch (const std::invalid_argument& e) {
    // The declaration's message: the flag that would serve it.
    EXPECT_EQ(std::string(e.what()),
              "the default policy spd is not served: the scheduler has no --spd-head");
  }
  o = {};
  o.spec.default_mode = v1::DECODING_POLICY_RECYCLE;
  o.spec.Of<scheduler::RecycleOptions>().drafts = 0;
  try {
    make(o);
    ADD_FAILURE() << "recycle as the default with --recycle-drafts 0 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--recycle-drafts 0"), std::string::npos) << e.what();
  }
  o = {};
  o.spec.Of<scheduler::PpsdOptions>().head = TempDir() + "/no-such-head";
  EXPECT_THROW(make(o), std::exception);
}

}  // namespace
}  // namespace specline::testing

namespace specline::testing {
namespace {

// A stage that dies while drafts are in flight fails the speculative
// requests cleanly (UNAVAILABLE), every reservation and drafter cache comes
// back, and speculation works again once the stage is back.
TEST(SpecFailure, DeadStageWithDraftsInFlightFailsCleanlyAndRecovers) {
  scheduler::EngineOptions o = SpecOptions(2, "ppsd-layer", "spd-v11");
  o.batch_timeout = 1500ms;  // how a batch lost inside the pipeline shows
  InprocPipeline p(2, o, kStageKv, kStageDelay);
  const auto kv0 = p.engine().Stats().kv_free_tokens;
  std::vector<scheduler::RequestOptions> specs;
  for (v1::DecodingPolicy mode : {v1::DECODING_POLICY_PPSD, v1::DECODING_POLICY_SPD, v1::DECODING_POLICY_SPD}) {
    scheduler::RequestOptions r = Greedy(20 + specs.size(), 150);
    r.mode = mode;
    if (specs.size() == 2) r.oracle = {true, 0.5, Generate1(p.model(), r).tokens};
    specs.push_back(r);
  }
  // Stage 0 holds every batch at its gate: the requests advance only by
  // the passes the test grants, so none can outrun the kill, and every one
  // must fail.
  p.gate().Close();
  std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
  for (const auto& r : specs) {
    auto st = p.engine().Submit(r);
    ASSERT_TRUE(st.ok()) << st.status();
    streams.push_back(*st);
  }
  std::vector<int> tokens;
  std::vector<bool> ended;
  const int64_t passed = p.gate().StepUntil([&] { return DrainStarted(streams, tokens, ended); });
  ASSERT_GE(passed, 0) << "no first token";
  // A pass commits at most a handful of tokens per request (its verified
  // drafts plus one); 150 are far out of reach.
  ASSERT_LT(passed, 20);
  for (size_t i = 0; i < streams.size(); ++i) ASSERT_FALSE(ended[i]) << "request " << i;
  // Stage 1 dies with the engine's next batches (drafts included) in flight:
  // what stage 0 now sends on is lost.
  p.StopRunner(1);
  p.gate().Open();
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamResult r = Collect(*streams[i]);
    EXPECT_EQ(r.last.finish, scheduler::FinishReason::kError) << "request " << i;
    EXPECT_EQ(r.last.error.code(), absl::StatusCode::kUnavailable) << r.last.error;
    EXPECT_LT(tokens[i] + static_cast<int>(r.tokens.size()), 150) << "request " << i;
  }
  EXPECT_EQ(p.engine().Stats().running, 0);
  p.StartRunner(1);
  ASSERT_TRUE(Eventually([&] { return p.engine().Stats().pipeline_up; }));
  EXPECT_EQ(p.engine().Stats().kv_free_tokens, kv0);
  int64_t drafts = 0;  // over all requests: per request it depends on timing
  for (auto r : specs) {
    r.max_tokens = 30;
    if (r.oracle.enabled) r.oracle.reference = Generate1(p.model(), r).tokens;
    const StreamResult got = RunRequest(p, r);
    EXPECT_EQ(got.tokens, Generate1(p.model(), r).tokens);
    drafts += got.last.spec.draft_tokens;
  }
  EXPECT_GT(drafts, 0);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

}  // namespace
}  // namespace specline::testing

#include "model/drafters/spd_module.h"
#include "scheduler/policies/pipeline_drafter.h"

namespace specline::testing {
namespace {

// The SPD drafter feeds the module the paper's input-state schedule: rows
// that left the pipeline at full depth n, an in-flight row k positions
// behind the newest at depth min(k, n) even when deeper taps have already
// arrived (stages run ahead of the drafter), because the module is trained
// on exactly that layout; rows at full depth become final.
TEST(SpdDrafter, UsesTheLockstepDepthScheduleNotTheDeepestTaps) {
  const int n = 4;
  std::shared_ptr<const ModelSource> base = OpenModel(SchedulerTestModel());
  std::shared_ptr<const DraftHead> head =
      LoadDraftHead(HeadDir("spd-v11", n), base->config());
  auto pool = std::make_shared<kernels::ThreadPool>(1);
  auto drafter = scheduler::MakeSpdDrafter(head, base, pool, 16, 1024);
  SpdModule reference(head, base, pool);
  const int dim = base->config().dim;

  // 9 positions; every tap of every row has arrived.
  scheduler::DraftJob job;
  job.seq_id = 7;
  job.end = 9;
  job.verified = 7;  // rows 0..5 have left the pipeline; 6 (verified) and 7, 8 (drafts) are in it
  job.first = 0;
  job.chain = MakePrompt(9, 5);
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::vector<std::map<int, std::vector<float>>> taps(9);
  for (auto& row : taps) {
    for (int l : reference.AllTaps()) {
      if (l == 0) continue;
      std::vector<float>& h = row[l];
      for (int i = 0; i < dim; ++i) h.push_back(normal(gen));
    }
  }
  job.taps = taps;
  drafter->Propose(job);
  ASSERT_TRUE(job.status.ok()) << job.status;
  EXPECT_EQ(job.fed, 6);  // rows 0..5 are final

  auto logits_with = [&](auto depth_of) {
    std::vector<std::vector<float>> feats(9);
    std::vector<SpdRow> rows;
    for (int p = 0; p < 9; ++p) {
      const int d = depth_of(p);
      for (int l : reference.TapsForDepth(d)) {
        if (l != 0) feats[p].insert(feats[p].end(), taps[p][l].begin(), taps[p][l].end());
      }
      rows.push_back({p, job.chain[p], d, feats[p]});
    }
    std::vector<float> logits(reference.vocab_size());
    reference.Release(1);
    EXPECT_TRUE(reference.Forward(1, rows, logits.data()).ok());
    return logits;
  };
  const std::vector<float> lockstep =
      logits_with([&](int p) { return p < 6 ? n : std::min(8 - p, n); });
  const std::vector<float> deepest = logits_with([&](int) { return n; });
  const int32_t want = static_cast<int32_t>(
      std::max_element(lockstep.begin(), lockstep.end()) - lockstep.begin());
  EXPECT_EQ(job.draft.token, want);
  EXPECT_NE(lockstep, deepest);  // the schedule matters for this module
}

// Taps can arrive after a flush (an early TAPS message races the last
// stage's output on another connection): a row from before the flush is
// still valid when every flush since kept its position.
TEST(SpecState, TapsFromBeforeAFlushStayValidBelowWhatItKept) {
  scheduler::SpecState sp;
  EXPECT_TRUE(sp.TapsValid(0, 0, 100));
  sp.flush_history.push_back({1, 10});  // the flush that started epoch 1 kept positions < 10
  EXPECT_TRUE(sp.TapsValid(0, 1, 9));
  EXPECT_FALSE(sp.TapsValid(0, 1, 10));
  EXPECT_TRUE(sp.TapsValid(1, 1, 50));
  sp.flush_history.push_back({2, 5});
  EXPECT_TRUE(sp.TapsValid(0, 2, 4));
  EXPECT_FALSE(sp.TapsValid(0, 2, 7)) << "the second flush dropped position 7";
  EXPECT_TRUE(sp.TapsValid(1, 2, 4));
  EXPECT_FALSE(sp.TapsValid(1, 2, 5));
  EXPECT_FALSE(sp.TapsValid(3, 2, 0)) << "not this chain's";
  sp.flush_history.pop_front();  // trimmed: epoch 0 is older than the history
  EXPECT_FALSE(sp.TapsValid(0, 2, 0));
  EXPECT_TRUE(sp.TapsValid(1, 2, 4));
}

// The SPD drafter waits until every row it recomputes has the taps of its
// lockstep depth, instead of feeding a lagging row shallower features.
TEST(SpdDrafter, WaitsForTheLockstepDepthsTaps) {
  const int n = 4;
  std::shared_ptr<const ModelSource> base = OpenModel(SchedulerTestModel());
  std::shared_ptr<const DraftHead> head = LoadDraftHead(HeadDir("spd-v11", n), base->config());
  auto drafter =
      scheduler::MakeSpdDrafter(head, base, std::make_shared<kernels::ThreadPool>(1), 16, 1024);
  SpdModule module(head, base, std::make_shared<kernels::ThreadPool>(1));
  const int32_t verified = 7;  // rows 0..5 left the pipeline, 6 is the newest verified
  scheduler::SpecState sp;
  sp.fed = 6;
  sp.drafts.push_back({MakePrompt(1, 6)[0], {}});
  sp.drafts.push_back({MakePrompt(1, 7)[0], {}});  // rows 6, 7 at depths 2, 1; 8 at 0
  const std::vector<float> h(base->config().dim, 0.5f);
  auto give = [&](int32_t pos, int depth) {
    for (int l : module.TapsForDepth(depth)) {
      if (l != 0) sp.taps[pos][l] = h;
    }
  };
  EXPECT_FALSE(drafter->Ready(sp, verified));
  give(6, 2);
  EXPECT_FALSE(drafter->Ready(sp, verified)) << "row 7 lacks depth 1";
  give(7, 1);
  EXPECT_TRUE(drafter->Ready(sp, verified));
  sp.fed = 5;  // row 5 left the pipeline and is not final: it needs depth n
  EXPECT_FALSE(drafter->Ready(sp, verified));
  give(5, n);
  EXPECT_TRUE(drafter->Ready(sp, verified));
}

}  // namespace
}  // namespace specline::testing
