// The scheduler engine over real in-process stages: every request's output
// equals plain autoregressive decoding token for token (greedy and seeded
// sampling, alone and 24 at once), KV capacity always comes back, endings are
// exact, admission and overflow behave, and a dead stage fails the running
// streams with UNAVAILABLE and is recovered from.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/inproc_pipeline.h"

namespace specline::testing {
namespace {

using scheduler::EngineOptions;
using scheduler::FinishReason;
using scheduler::FinishReasonName;
using scheduler::RequestOptions;

EngineOptions SmallBatches() {
  EngineOptions o;
  o.batch.max_batch_tokens = 48;
  o.batch.prefill_chunk = 16;  // prompts up to 100 tokens take several chunks
  o.batch_timeout = 60s;
  return o;
}

RequestOptions Greedy(std::vector<int32_t> prompt, int max_tokens) {
  RequestOptions s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  return s;
}

void ExpectMatchesReference(InprocPipeline& p, const std::vector<RequestOptions>& specs) {
  std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
  for (const RequestOptions& s : specs) {
    auto st = p.engine().Submit(s);
    ASSERT_TRUE(st.ok()) << st.status();
    streams.push_back(*st);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    StreamResult got = Collect(*streams[i]);
    Reference want = Generate1(p.model(), specs[i]);
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i << " (prompt of "
                                       << specs[i].prompt.size() << ")";
    EXPECT_EQ(FinishReasonName(got.last.finish), want.reason) << "request " << i;
    EXPECT_TRUE(got.last.error.ok()) << got.last.error;
    EXPECT_GE(got.queue_seconds, 0.0) << "the first event carries the queue time";
  }
}

class EngineStagesTest : public ::testing::TestWithParam<int> {};

TEST_P(EngineStagesTest, GreedySingleRequestEqualsGenerate) {
  InprocPipeline p(GetParam(), SmallBatches());
  ExpectMatchesReference(p, {Greedy(MakePrompt(37, 1), 20)});
}

TEST_P(EngineStagesTest, TwentyFourConcurrentGreedyRequestsEqualGenerate) {
  InprocPipeline p(GetParam(), SmallBatches());
  const int kv0 = p.engine().Stats().kv_free_tokens;
  std::vector<RequestOptions> specs;
  const int lengths[] = {1, 2, 5, 9, 15, 16, 17, 31, 33, 48, 64, 100};
  for (int i = 0; i < 24; ++i) {
    specs.push_back(Greedy(MakePrompt(lengths[i % 12], 100 + i), 4 + (i * 7) % 23));
  }
  ExpectMatchesReference(p, specs);
  EXPECT_EQ(p.engine().Stats().kv_free_tokens, kv0);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "stages kept KV of finished requests";
}

TEST_P(EngineStagesTest, SeededSamplingEqualsGenerateWithTheSameSeed) {
  InprocPipeline p(GetParam(), SmallBatches());
  std::vector<RequestOptions> specs;
  for (int i = 0; i < 8; ++i) {
    RequestOptions s = Greedy(MakePrompt(3 + 11 * i, 200 + i), 24);
    s.sampling.temperature = 0.9f;
    s.sampling.top_k = i % 2 ? 0 : 40;
    s.sampling.top_p = i % 3 ? 0.95f : 1.0f;
    s.sampling.min_p = i == 5 ? 0.05f : 0.0f;
    s.sampling.repetition_penalty = i == 6 ? 1.2f : 1.0f;
    s.sampling.seed = 1000 + i;
    specs.push_back(s);
  }
  ExpectMatchesReference(p, specs);
}

INSTANTIATE_TEST_SUITE_P(Stages, EngineStagesTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "stages"; });

TEST(EngineTest, EndingsAreExact) {
  InprocPipeline p(2, SmallBatches());
  // max_tokens
  RequestOptions len = Greedy(MakePrompt(10, 7), 13);
  // a stop token: the 6th token greedy decoding produces
  const std::vector<int32_t> free_run = Generate1(p.model(), Greedy(MakePrompt(12, 8), 30)).tokens;
  ASSERT_GE(free_run.size(), 6u);
  RequestOptions stop = Greedy(MakePrompt(12, 8), 30);
  stop.stop_ids = {free_run[5]};
  // the context length (160): at most 160 - prompt + 1 tokens
  RequestOptions ctx = Greedy(MakePrompt(150, 9), 100);
  ExpectMatchesReference(p, {len, stop, ctx});

  auto run = [&](const RequestOptions& s) {
    auto st = p.engine().Submit(s);
    EXPECT_TRUE(st.ok());
    return Collect(**st);
  };
  StreamResult l = run(len);
  EXPECT_EQ(l.tokens.size(), 13u);
  EXPECT_EQ(l.last.finish, FinishReason::kLength);
  StreamResult s = run(stop);
  ASSERT_FALSE(s.tokens.empty());
  EXPECT_EQ(s.tokens.back(), free_run[5]);
  EXPECT_LE(s.tokens.size(), 6u);
  EXPECT_EQ(s.last.finish, FinishReason::kStop);
  StreamResult c = run(ctx);
  EXPECT_EQ(c.tokens.size(), 160u - 150u + 1u) << "decodes until the context is full";
  EXPECT_EQ(c.last.finish, FinishReason::kLength);
}

TEST(EngineTest, CancelMidStreamFreesKvEverywhere) {
  InprocPipeline p(3, SmallBatches());
  const auto stats0 = p.engine().Stats();
  constexpr int kMaxTokens = 120;
  // Stage 0 holds every batch until the gate lets it through, so the
  // streams cannot run to their end before the test cancels them (no race
  // with a fast pipeline or a slow test thread).
  p.gate().Close();
  std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto st = p.engine().Submit(Greedy(MakePrompt(20 + i, 300 + i), kMaxTokens));
    ASSERT_TRUE(st.ok());
    streams.push_back(*st);
  }
  // One batch at a time until every stream has produced a token. A decoding
  // step of a sequence needs its own pass through stage 0, so no stream is
  // more than `passed` tokens in.
  std::vector<int> tokens;
  std::vector<bool> ended;
  const int64_t passed = p.gate().StepUntil([&] { return DrainStarted(streams, tokens, ended); });
  ASSERT_GE(passed, 0) << "the streams never produced a token";
  ASSERT_LT(passed, kMaxTokens - 1) << "so no stream can have finished";
  std::printf("[ gate ] %lld batches let through before the cancels\n", static_cast<long long>(passed));
  for (size_t i = 0; i < streams.size(); ++i) {
    ASSERT_FALSE(ended[i]);
    EXPECT_TRUE(p.engine().Cancel(streams[i]->id())) << "stream " << i << " is still running";
    EXPECT_FALSE(p.engine().Cancel(streams[i]->id())) << "already gone";
  }
  p.gate().Open();
  for (size_t i = 0; i < streams.size(); ++i) {
    StreamResult r = Collect(*streams[i]);
    EXPECT_EQ(r.last.finish, FinishReason::kAbort);
    EXPECT_LT(tokens[i] + static_cast<int>(r.tokens.size()), kMaxTokens);
  }
  const auto stats = p.engine().Stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.kv_free_tokens, stats0.kv_free_tokens);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "a stage kept a cancelled sequence";
}

TEST(EngineTest, AdmissionWaitsForKvAndCapacityReturns) {
  // 128 positions per stage: two requests of 64 at a time; the rest wait.
  EngineOptions o = SmallBatches();
  InprocPipeline p(2, o, /*stage_kv_tokens=*/128);
  ASSERT_EQ(p.engine().Stats().kv_capacity_tokens, 128);
  std::vector<RequestOptions> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(Greedy(MakePrompt(30, 400 + i), 34));
  ExpectMatchesReference(p, specs);
  EXPECT_EQ(p.engine().Stats().kv_free_tokens, 128);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  // A request that could never fit is refused up front.
  auto huge = p.engine().Submit(Greedy(MakePrompt(100, 5), 50));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument) << huge.status();
}

TEST(EngineTest, FullWaitingQueueIsResourceExhausted) {
  EngineOptions o = SmallBatches();
  o.max_waiting = 2;
  InprocPipeline p(2, o, /*stage_kv_tokens=*/64);
  // Stage 1's data plane is stopped, so the first request stays running
  // (its batch is lost; the long batch timeout keeps the pipeline "up").
  p.StopRunner(1);
  auto a = p.engine().Submit(Greedy(MakePrompt(4, 1), 60));  // takes all 64 positions
  ASSERT_TRUE(a.ok());
  auto b = p.engine().Submit(Greedy(MakePrompt(4, 2), 60));
  auto c = p.engine().Submit(Greedy(MakePrompt(4, 3), 60));
  ASSERT_TRUE(b.ok() && c.ok());
  auto d = p.engine().Submit(Greedy(MakePrompt(4, 4), 60));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted) << d.status();
  const auto stats = p.engine().Stats();
  EXPECT_EQ(stats.running, 1);
  EXPECT_EQ(stats.waiting, 2);
  // Cancelling a waiting request frees its queue place.
  EXPECT_TRUE(p.engine().Cancel((*c)->id()));
  EXPECT_EQ(Collect(**c).last.finish, FinishReason::kAbort);
  EXPECT_TRUE(p.engine().Submit(Greedy(MakePrompt(4, 5), 60)).ok());
}

TEST(EngineTest, MalformedRequestsAreInvalidAndChangeNothing) {
  InprocPipeline p(1, SmallBatches());
  const auto before = p.engine().Stats();
  auto bad = [&](RequestOptions s, const std::string& field) {
    auto st = p.engine().Submit(s);
    ASSERT_FALSE(st.ok()) << field;
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << st.status();
    EXPECT_NE(st.status().message().find(field), std::string::npos) << st.status();
  };
  bad(Greedy({}, 5), "prompt");
  bad(Greedy({1, 96}, 5), "prompt[1]");
  bad(Greedy({1, -1}, 5), "prompt[1]");
  bad(Greedy(MakePrompt(160, 1), 5), "prompt");
  bad(Greedy({1, 2}, 0), "max_tokens");
  RequestOptions s = Greedy({1, 2}, 5);
  s.sampling.top_p = 1.5f;
  bad(s, "top_p");
  s = Greedy({1, 2}, 5);
  s.sampling.temperature = -1;
  bad(s, "temperature");
  s = Greedy({1, 2}, 5);
  s.stop_ids = {500};
  bad(s, "stop_token_ids[0]");
  const auto after = p.engine().Stats();
  EXPECT_EQ(after.running, before.running);
  EXPECT_EQ(after.waiting, before.waiting);
  EXPECT_EQ(after.kv_free_tokens, before.kv_free_tokens);
  EXPECT_EQ(after.steps, before.steps);
}

// Streams that were running when a stage died end UNAVAILABLE naming the
// failure; once the stage is back, the pipeline is reset and serves again.
void ExpectFailureAndRecovery(InprocPipeline& p, const std::function<void()>& kill,
                              const std::function<void()>& revive, const std::string& expect) {
  const auto kv0 = p.engine().Stats().kv_free_tokens;
  std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    auto st = p.engine().Submit(Greedy(MakePrompt(10 + i, 500 + i), 140));
    ASSERT_TRUE(st.ok()) << st.status();
    streams.push_back(*st);
  }
  for (auto& s : streams) ASSERT_TRUE(s->Next(60s).has_value()) << "no first token";
  kill();
  for (auto& s : streams) {
    StreamResult r = Collect(*s);
    EXPECT_EQ(r.last.finish, FinishReason::kError);
    EXPECT_EQ(r.last.error.code(), absl::StatusCode::kUnavailable) << r.last.error;
    EXPECT_NE(r.last.error.message().find(expect), std::string::npos) << r.last.error;
  }
  EXPECT_EQ(p.engine().Stats().running, 0);
  revive();
  ASSERT_TRUE(Eventually([&] {
    auto s = p.engine().Stats();
    return s.pipeline_up && std::all_of(s.stage_up.begin(), s.stage_up.end(), [](bool b) { return b; });
  })) << "the pipeline did not come back";
  EXPECT_EQ(p.engine().Stats().kv_free_tokens, kv0);
  ExpectMatchesReference(p, {Greedy(MakePrompt(25, 9), 12), Greedy(MakePrompt(3, 10), 7)});
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "Reset or release missed a sequence";
}

TEST(EngineTest, DeadStageDataPlaneFailsStreamsAndRecovers) {
  EngineOptions o = SmallBatches();
  o.batch_timeout = 1500ms;  // how the loss of a batch inside the pipeline shows
  InprocPipeline p(2, o);
  ExpectFailureAndRecovery(
      p, [&] { p.StopRunner(1); }, [&] { p.StartRunner(1); }, "did not come back");
}

TEST(EngineTest, UnreachableStageControlFailsStreamsAndRecovers) {
  InprocPipeline p(3, SmallBatches());
  ExpectFailureAndRecovery(
      p,
      [&] {
        p.StopControl(2);
        p.StopRunner(2);
      },
      [&] {
        p.StartRunner(2);
        p.StartControl(2);
      },
      "stage 2");
  EXPECT_GE(p.engine().Stats().steps, 1u);
}

TEST(EngineTest, SubmitWhileDownIsUnavailable) {
  InprocPipeline p(2, SmallBatches());
  p.StopControl(1);
  ASSERT_TRUE(Eventually([&] { return !p.engine().up(); }));
  EXPECT_FALSE(p.engine().Stats().stage_up[1]);
  auto st = p.engine().Submit(Greedy({1, 2, 3}, 4));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), absl::StatusCode::kUnavailable) << st.status();
  p.StartControl(1);
  ASSERT_TRUE(Eventually([&] { return p.engine().up(); }));
  ExpectMatchesReference(p, {Greedy({1, 2, 3}, 4)});
}

}  // namespace
}  // namespace specline::testing
