// The Scheduler gRPC service in process (port 0) over real stages:
// validation, streaming equal to plain decoding, cancellation freeing KV,
// stats and model info.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <thread>

#include "scheduler/scheduler_service.h"
#include "tests/inproc_pipeline.h"

namespace specline::testing {
namespace {

class SchedulerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scheduler::EngineOptions o;
    o.batch.prefill_chunk = 16;
    o.batch_timeout = 60s;
    pipeline_ = std::make_unique<InprocPipeline>(2, o);
    service_ = std::make_unique<scheduler::SchedulerService>(pipeline_->engine());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    ASSERT_GT(port, 0);
    stub_ = internal::Scheduler::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    pipeline_.reset();
  }

  internal::SchedulerStats Stats() {
    grpc::ClientContext ctx;
    internal::SchedulerStats s;
    EXPECT_TRUE(stub_->GetStats(&ctx, {}, &s).ok());
    return s;
  }

  // Runs a request to its end: the status, all tokens, the events.
  grpc::Status Run(const internal::SubmitRequest& req, std::vector<int32_t>* tokens,
                   std::vector<internal::SubmitEvent>* events = nullptr) {
    grpc::ClientContext ctx;
    auto reader = stub_->Submit(&ctx, req);
    internal::SubmitEvent e;
    while (reader->Read(&e)) {
      tokens->insert(tokens->end(), e.tokens().begin(), e.tokens().end());
      if (events) events->push_back(e);
    }
    return reader->Finish();
  }

  std::unique_ptr<InprocPipeline> pipeline_;
  std::unique_ptr<scheduler::SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<internal::Scheduler::Stub> stub_;
};

internal::SubmitRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
  internal::SubmitRequest r;
  r.set_request_id("test");
  for (int32_t t : prompt) r.add_prompt(t);
  r.set_max_tokens(max_tokens);
  return r;
}

TEST_F(SchedulerServiceTest, StreamsTheSameTokensAsPlainDecoding) {
  const std::vector<int32_t> prompt = MakePrompt(40, 3);
  internal::SubmitRequest req = Request(prompt, 15);
  req.mutable_sampling()->set_temperature(0.7f);
  req.mutable_sampling()->set_seed(123);
  std::vector<int32_t> tokens;
  std::vector<internal::SubmitEvent> events;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = Run(req, &tokens, &events);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(st.ok()) << st.error_message();

  scheduler::RequestOptions spec;
  spec.prompt = prompt;
  spec.max_tokens = 15;
  spec.sampling.temperature = 0.7f;
  spec.sampling.seed = 123;
  EXPECT_EQ(tokens, Generate1(pipeline_->model(), spec).tokens);
  ASSERT_EQ(events.size(), 15u) << "one event per token";
  // The queue time is on the first event only. An unset proto3 double reads
  // 0, so "set" is checked as > 0 (arrival and first scheduling are two
  // different clock readings); it cannot exceed the whole call (a causal
  // bound, not a timing assumption).
  EXPECT_GT(events.front().queue_seconds(), 0.0) << "the first event carries the queue time";
  EXPECT_LE(events.front().queue_seconds(), wall);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_EQ(events[i].queue_seconds(), 0.0) << i;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  }
  EXPECT_EQ(events.back().finish_reason(), v1::FINISH_REASON_LENGTH);
}

TEST_F(SchedulerServiceTest, MalformedRequestsAreRejectedNamingTheField) {
  const internal::SchedulerStats before = Stats();
  struct Case {
    internal::SubmitRequest req;
    grpc::StatusCode code;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({Request({}, 5), grpc::INVALID_ARGUMENT, "prompt"});
  cases.push_back({Request({1, 1000}, 5), grpc::INVALID_ARGUMENT, "prompt[1]"});
  cases.push_back({Request(MakePrompt(200, 1), 5), grpc::INVALID_ARGUMENT, "prompt"});
  cases.push_back({Request({1}, 0), grpc::INVALID_ARGUMENT, "max_tokens"});
  cases.push_back({Request({1}, -4), grpc::INVALID_ARGUMENT, "max_tokens"});
  Case c{Request({1}, 5), grpc::INVALID_ARGUMENT, "top_p"};
  c.req.mutable_sampling()->set_top_p(3);
  cases.push_back(c);
  c = {Request({1}, 5), grpc::INVALID_ARGUMENT, "temperature"};
  c.req.mutable_sampling()->set_temperature(-0.5f);
  cases.push_back(c);
  c = {Request({1}, 5), grpc::INVALID_ARGUMENT, "repetition_penalty"};
  c.req.mutable_sampling()->set_repetition_penalty(-1);
  cases.push_back(c);
  c = {Request({1}, 5), grpc::FAILED_PRECONDITION, "not available"};
  c.req.set_policy(v1::DECODING_POLICY_PPSD);
  cases.push_back(c);
  for (const Case& k : cases) {
    std::vector<int32_t> tokens;
    grpc::Status st = Run(k.req, &tokens);
    EXPECT_EQ(st.error_code(), k.code) << k.field << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(k.field), std::string::npos) << st.error_message();
    EXPECT_TRUE(tokens.empty());
  }
  const internal::SchedulerStats after = Stats();
  EXPECT_EQ(after.steps(), before.steps());
  EXPECT_EQ(after.kv_free_tokens(), before.kv_free_tokens());
  EXPECT_EQ(after.running() + after.waiting(), 0);
}

TEST_F(SchedulerServiceTest, CancellingTheCallFreesKv) {
  const internal::SchedulerStats before = Stats();
  // Stage 0's gate lets batches through one at a time until two tokens
  // came, then holds the rest: the request cannot finish before the cancel.
  pipeline_->gate().Close();
  grpc::ClientContext ctx;
  auto reader = stub_->Submit(&ctx, Request(MakePrompt(30, 4), 120));
  internal::SubmitEvent e;
  std::atomic<int> read{0};
  std::thread first_two([&] {
    for (int i = 0; i < 2 && reader->Read(&e); ++i) ++read;
  });
  const int64_t passed = pipeline_->gate().StepUntil([&] { return read.load() == 2; });
  if (passed < 0) pipeline_->gate().Open();  // let the reader end
  first_two.join();
  ASSERT_EQ(read.load(), 2);
  ASSERT_LT(passed, 119) << "so the request cannot have finished";
  EXPECT_EQ(Stats().running(), 1);
  ctx.TryCancel();
  pipeline_->gate().Open();
  while (reader->Read(&e)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
  EXPECT_TRUE(Eventually([&] {
    auto s = Stats();
    return s.running() == 0 && s.kv_free_tokens() == before.kv_free_tokens();
  })) << "the cancelled request kept its KV reservation";
  EXPECT_TRUE(Eventually([&] { return pipeline_->StagesEmpty(); }))
      << "a stage kept the cancelled sequence";
}

TEST_F(SchedulerServiceTest, StatsAndModel) {
  internal::SchedulerStats s = Stats();
  EXPECT_EQ(s.n_stages(), 2);
  ASSERT_EQ(s.stage_up_size(), 2);
  EXPECT_TRUE(s.stage_up(0) && s.stage_up(1));
  EXPECT_EQ(s.kv_capacity_tokens(), InprocPipeline::kStageKvTokens);
  EXPECT_EQ(s.kv_free_tokens(), s.kv_capacity_tokens());
  grpc::ClientContext ctx;
  internal::ModelSummary m;
  ASSERT_TRUE(stub_->GetModel(&ctx, {}, &m).ok());
  EXPECT_EQ(m.vocab_size(), SchedulerTestConfig().vocab_size);
  EXPECT_EQ(m.context_length(), SchedulerTestConfig().max_seq_len);
  EXPECT_EQ(m.n_layers(), SchedulerTestConfig().n_layers);
  EXPECT_EQ(m.n_stages(), 2);
}

}  // namespace
}  // namespace specline::testing
