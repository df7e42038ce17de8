// What a pipeline failure does to requests (docs/security.md "Failures"):
// every stream ends exactly once; a request that had streamed tokens fails
// UNAVAILABLE, one that had none is held and runs from scratch once the
// pipeline is back (its output equal to plain decoding), unless the
// pipeline stays down past the retry window. Stage 0's gate holds every
// batch, so no request can finish or advance behind the test's back.
#include "tests/inproc_pipeline.h"

namespace specline::testing {
namespace {

using scheduler::EngineOptions;
using scheduler::FinishReason;
using scheduler::RequestOptions;

RequestOptions Greedy(std::vector<int32_t> prompt, int max_tokens) {
  RequestOptions s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  return s;
}

EngineOptions Options(std::chrono::milliseconds retry_window) {
  EngineOptions o;
  o.batch.max_batch_tokens = 48;
  o.batch.prefill_chunk = 16;
  o.batch_timeout = 60s;
  o.retry_window = retry_window;
  return o;
}

// 160 KV positions per stage: `first` (prompt 20 + 130 tokens) takes them
// all, so `second` waits in the queue without a token.
constexpr int kKv = 160;
RequestOptions First() { return Greedy(MakePrompt(20, 71), 130); }
RequestOptions Second() { return Greedy(MakePrompt(10, 72), 20); }

struct Started {
  std::shared_ptr<scheduler::RequestStream> first, second;
};

// Submits both with the gate closed and lets batches through one by one
// until `first` has a token; `second` is still queued then.
Started StartBoth(InprocPipeline& p) {
  p.gate().Close();
  Started s;
  s.first = *p.engine().Submit(First());
  s.second = *p.engine().Submit(Second());
  EXPECT_EQ(p.engine().Stats().waiting, 1) << "the second request must wait for KV";
  std::vector<int> tokens;
  std::vector<bool> ended;
  EXPECT_GE(p.gate().StepUntil([&] { return DrainStarted({s.first}, tokens, ended); }), 0);
  EXPECT_FALSE(ended[0]);
  return s;
}

void KillStage1(InprocPipeline& p) {
  p.StopControl(1);
  p.StopRunner(1);
  p.gate().Open();
  EXPECT_TRUE(Eventually([&] { return !p.engine().up(); })) << "the failure was not noticed";
}

void ReviveStage1(InprocPipeline& p) {
  p.StartRunner(1);
  p.StartControl(1);
}

// Nothing more after the last event: a stream ends exactly once.
void ExpectEndedOnce(scheduler::RequestStream& s) {
  EXPECT_FALSE(s.Next(50ms).has_value()) << "stream " << s.id() << " got an event after its last";
  EXPECT_TRUE(s.ended());
}

TEST(EngineRestart, QueuedRequestRunsAfterRecoveryAndEqualsPlainDecoding) {
  InprocPipeline p(2, Options(60s), kKv);
  Started s = StartBoth(p);
  KillStage1(p);
  StreamResult first = Collect(*s.first);
  EXPECT_EQ(first.last.finish, FinishReason::kError);
  EXPECT_EQ(first.last.error.code(), absl::StatusCode::kUnavailable) << first.last.error;
  ExpectEndedOnce(*s.first);
  // Held, not failed: the queue keeps it while the pipeline is down.
  EXPECT_FALSE(s.second->ended());
  EXPECT_EQ(p.engine().Stats().waiting, 1);

  ReviveStage1(p);
  StreamResult second = Collect(*s.second);
  EXPECT_TRUE(second.last.error.ok()) << second.last.error;
  EXPECT_EQ(second.tokens, Generate1(p.model(), Second()).tokens);
  ExpectEndedOnce(*s.second);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  EXPECT_EQ(p.engine().Stats().kv_free_tokens, kKv);
}

TEST(EngineRestart, RunningRequestWithoutTokenRestartsUnderAFreshId) {
  // The first request is caught mid-prefill (no token yet): it restarts.
  InprocPipeline p(2, Options(60s), kKv);
  p.gate().Close();
  RequestOptions long_prompt = Greedy(MakePrompt(100, 73), 20);
  auto stream = *p.engine().Submit(long_prompt);
  ASSERT_GE(p.gate().StepUntil([&] { return p.gate().passed() >= 2; }), 0);
  EXPECT_FALSE(stream->Next(0ms).has_value()) << "prefill of 100 tokens in chunks of 16 is not done";
  KillStage1(p);
  ReviveStage1(p);
  StreamResult r = Collect(*stream);
  EXPECT_TRUE(r.last.error.ok()) << r.last.error;
  EXPECT_EQ(r.tokens, Generate1(p.model(), long_prompt).tokens);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "the old attempt's KV was kept";
}

TEST(EngineRestart, HeldRequestFailsWhenThePipelineStaysDown) {
  InprocPipeline p(2, Options(300ms), kKv);
  Started s = StartBoth(p);
  KillStage1(p);
  EXPECT_EQ(Collect(*s.first).last.error.code(), absl::StatusCode::kUnavailable);
  StreamResult second = Collect(*s.second);
  EXPECT_EQ(second.last.error.code(), absl::StatusCode::kUnavailable) << second.last.error;
  EXPECT_NE(second.last.error.message().find("did not come back within 300 ms"), std::string::npos)
      << second.last.error;
  EXPECT_TRUE(second.tokens.empty());
  ExpectEndedOnce(*s.second);
  EXPECT_EQ(p.engine().Stats().waiting, 0);
  ReviveStage1(p);
  ASSERT_TRUE(Eventually([&] { return p.engine().up(); }));
  StreamResult again = Collect(**p.engine().Submit(Second()));
  EXPECT_EQ(again.tokens, Generate1(p.model(), Second()).tokens);
}

TEST(EngineRestart, NoRestartWindowFailsAtOnce) {
  InprocPipeline p(2, Options(0ms), kKv);
  Started s = StartBoth(p);
  KillStage1(p);
  EXPECT_EQ(Collect(*s.first).last.error.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Collect(*s.second).last.error.code(), absl::StatusCode::kUnavailable);
  ReviveStage1(p);
}

TEST(EngineRestart, StopEndsEveryStreamExactlyOnce) {
  // The engine's shutdown finishes sequences while walking its lists: the
  // loop that used to free a sequence and then read it (issue 14).
  auto p = std::make_unique<InprocPipeline>(2, Options(60s), kKv);
  Started s = StartBoth(*p);
  p->engine().Stop();
  p->gate().Open();
  for (auto* stream : {s.first.get(), s.second.get()}) {
    StreamResult r = Collect(*stream);
    EXPECT_EQ(r.last.error.code(), absl::StatusCode::kUnavailable) << r.last.error;
    ExpectEndedOnce(*stream);
  }
}

}  // namespace
}  // namespace specline::testing
