// The multi-tenant limits of issue 26 through `specline serve` on loopback
// (gateway, scheduler and stages as processes), two principals from one
// token file:
//   - the gateway's tokens-per-minute quota answers RESOURCE_EXHAUSTED with
//     `retry-after` metadata over gRPC and 429 with Retry-After over HTTP,
//     one principal's use never touches another's;
//   - the scheduler's per-tenant KV limit refuses a request too large for
//     it, and holds a principal at its limit in the queue while the other
//     is served; the KV comes back to the whole capacity afterwards;
//   - a full scheduler queue's retry-after reaches the client;
//   - per-principal series appear on /metrics only with
//     --metrics-per-principal.
// Progress is read from the scheduler's stats and the streams, never timed.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

std::string SlowModel() { return SlowServingModel(4096, /*seed=*/26); }

std::string TokenFile() {
  const std::string path = TempDir() + "/principals";
  std::ofstream(path) << "alice tok-alice\nbob tok-bob\n";
  return path;
}

struct Outcome {
  grpc::Status status;
  int tokens = 0;
  std::string retry_after;  // trailing metadata; "" when absent
};

// One request as `token`'s principal; `after_first` runs once the first
// message arrived (with the call, to cancel it).
Outcome Generate(const ServingStack& s, const std::string& token, const v1::GenerateRequest& req,
                 const std::function<void(grpc::ClientContext&)>& after_first = {}) {
  auto stub = v1::Generation::NewStub(s.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 300s);
  ctx.AddMetadata("authorization", "Bearer " + token);
  auto reader = stub->Generate(&ctx, req);
  Outcome out;
  v1::GenerateResponse msg;
  bool first = true;
  while (reader->Read(&msg)) {
    out.tokens += msg.token_ids_size();
    if (first && after_first) after_first(ctx);
    first = false;
  }
  out.status = reader->Finish();
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (auto it = trailers.find("retry-after"); it != trailers.end()) {
    out.retry_after = std::string(it->second.data(), it->second.size());
  }
  return out;
}

HttpResult Completion(const ServingStack& s, const std::string& token, int prompt_len,
                      int max_tokens) {
  nlohmann::json prompt = nlohmann::json::array();
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(1 + (i * 7) % 200);
  return PostJson(s.ports["gateway"]["http"].get<int>(), "/v1/completions",
                  {{"prompt", prompt}, {"max_tokens", max_tokens}},
                  {{"Authorization", "Bearer " + token}});
}

// A whole number of seconds, at least 1 and at most a minute.
bool IsRetryAfter(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  const long seconds = std::stol(text);
  return seconds >= 1 && seconds <= 60;
}

TEST(TenantLimits, TokensPerMinuteQuotaAnswers429AndResourceExhaustedWithRetryAfter) {
  // 100 tokens a minute: a principal that used 92 of them must wait for
  // the bucket to refill (1.7 tokens a second) before a 64-token request.
  auto stack = StartStack(SlowModel(), 1,
                          {"--auth-token-file", TokenFile(), "--max-tokens-per-minute-per-principal",
                           "100", "--metrics-per-principal", "true"});
  const ServingStack& s = *stack;
  const Outcome first = Generate(s, "tok-alice", IgnoreEosIdRequest(90, 2));  // 92 tokens
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_EQ(first.tokens, 2);

  const Outcome refused = Generate(s, "tok-alice", IgnoreEosIdRequest(4, 60));  // 64 tokens
  EXPECT_EQ(refused.status.error_code(), grpc::RESOURCE_EXHAUSTED) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("--max-tokens-per-minute-per-principal"),
            std::string::npos)
      << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("alice"), std::string::npos);
  EXPECT_TRUE(IsRetryAfter(refused.retry_after)) << "retry-after: '" << refused.retry_after << "'";
  EXPECT_EQ(refused.tokens, 0);

  const HttpResult http = Completion(s, "tok-alice", 4, 60);
  EXPECT_EQ(http.status, 429) << http.body;
  EXPECT_TRUE(IsRetryAfter(http.retry_after)) << "Retry-After: '" << http.retry_after << "'";
  EXPECT_EQ(http.Json()["error"]["type"], "rate_limit_error") << http.body;
  EXPECT_NE(http.body.find("--max-tokens-per-minute-per-principal"), std::string::npos) << http.body;

  // More than a minute's worth can never fit: refused, with no retry time.
  const Outcome never = Generate(s, "tok-bob", IgnoreEosIdRequest(4, 200));
  EXPECT_EQ(never.status.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_NE(never.status.error_message().find("lower max_tokens"), std::string::npos)
      << never.status.error_message();
  EXPECT_EQ(never.retry_after, "");
  // Bob's own bucket is untouched by alice's use and by that refusal.
  const Outcome bob = Generate(s, "tok-bob", IgnoreEosIdRequest(4, 60));
  EXPECT_TRUE(bob.status.ok()) << bob.status.error_message();
  EXPECT_EQ(bob.tokens, 60);
  const HttpResult bob_http = Completion(s, "tok-bob", 4, 8);
  EXPECT_EQ(bob_http.status, 200) << bob_http.body;
  EXPECT_EQ(bob_http.retry_after, "");

  // Per-principal series (--metrics-per-principal): what each one sent,
  // used and was refused. Generated tokens are counted as a request ends,
  // which may be just after its client has its last message.
  std::string m;
  ASSERT_TRUE(Eventually([&] {
    m = ScrapeMetrics(s.metrics_port());
    return MetricValueIfPresent(m, "specline_principal_generation_tokens_total",
                                "{principal=\"bob\"}") == 68.0;
  })) << m;
  EXPECT_EQ(MetricValue(m, "specline_principal_requests_total", "{principal=\"alice\"}"), 1);
  EXPECT_EQ(MetricValue(m, "specline_principal_prompt_tokens_total", "{principal=\"alice\"}"), 90);
  EXPECT_EQ(MetricValue(m, "specline_principal_generation_tokens_total", "{principal=\"alice\"}"), 2);
  EXPECT_EQ(MetricValue(m, "specline_principal_requests_total", "{principal=\"bob\"}"), 2);
  EXPECT_EQ(MetricValue(m, "specline_principal_prompt_tokens_total", "{principal=\"bob\"}"), 8);
  EXPECT_EQ(MetricValue(m, "specline_principal_rejections_total",
                        "{principal=\"alice\",limit=\"max-tokens-per-minute-per-principal\"}"),
            2);
  EXPECT_EQ(MetricValue(m, "specline_principal_rejections_total",
                        "{principal=\"bob\",limit=\"max-tokens-per-minute-per-principal\"}"),
            1);
  EXPECT_EQ(MetricValue(m, "specline_request_rejections_total",
                        "{limit=\"max-tokens-per-minute-per-principal\"}"),
            3);
}

TEST(TenantLimits, KvBlocksPerTenantRefusesTooLargeHoldsAtTheLimitAndComesBack) {
  // 64 blocks of 16 positions a principal: alice's long request takes 63.
  auto stack = StartStack(SlowModel(), 2,
                          {"--auth-token-file", TokenFile(), "--max-kv-blocks-per-tenant", "64",
                           "--kv-capacity-tokens", "4096"});
  const ServingStack& s = *stack;
  const internal::SchedulerStats before = SchedulerStats(s);
  ASSERT_EQ(before.kv_capacity_tokens(), 4096);
  ASSERT_EQ(before.kv_free_tokens(), 4096);

  // 4 + 1100 positions: 69 blocks, more than a principal may ever hold.
  const Outcome huge = Generate(s, "tok-bob", IgnoreEosIdRequest(4, 1100));
  EXPECT_EQ(huge.status.error_code(), grpc::RESOURCE_EXHAUSTED) << huge.status.error_message();
  EXPECT_NE(huge.status.error_message().find("--max-kv-blocks-per-tenant 64"), std::string::npos)
      << huge.status.error_message();
  EXPECT_EQ(huge.retry_after, "") << "waiting never makes it fit";
  const HttpResult huge_http = Completion(s, "tok-bob", 4, 1100);
  EXPECT_EQ(huge_http.status, 429) << huge_http.body;
  EXPECT_NE(huge_http.body.find("--max-kv-blocks-per-tenant"), std::string::npos) << huge_http.body;
  EXPECT_EQ(huge_http.retry_after, "");

  // Alice holds 63 blocks (4 + 1000 positions) with a long request; her
  // next one (2 blocks) must wait for it, while bob is served at once.
  Outcome second;
  std::thread second_thread;
  bool bob_served = false;
  int waiting_while_held = -1;
  const Outcome held = Generate(s, "tok-alice", IgnoreEosIdRequest(4, 1000), [&](grpc::ClientContext& call) {
    second_thread = std::thread([&] { second = Generate(s, "tok-alice", IgnoreEosIdRequest(4, 20)); });
    EXPECT_TRUE(Eventually([&] { return SchedulerStats(s).waiting() == 1; }))
        << "alice's second request did not queue";
    const Outcome bob = Generate(s, "tok-bob", IgnoreEosIdRequest(4, 20));
    bob_served = bob.status.ok() && bob.tokens == 20;
    const internal::SchedulerStats during = SchedulerStats(s);
    waiting_while_held = during.waiting();
    EXPECT_EQ(during.running(), 1) << "only alice's long request runs";
    call.TryCancel();  // alice's long request ends; her second one runs
  });
  second_thread.join();
  EXPECT_EQ(held.status.error_code(), grpc::CANCELLED) << held.status.error_message();
  EXPECT_TRUE(bob_served) << "bob was not served while alice was at her limit";
  EXPECT_EQ(waiting_while_held, 1) << "alice's second request waits at her limit";
  EXPECT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(second.tokens, 20);

  // Everything ended: free (or cached and evictable) KV is the whole
  // capacity again, and nothing waits or runs.
  internal::SchedulerStats after;
  EXPECT_TRUE(Eventually([&] {
    after = SchedulerStats(s);
    return after.running() == 0 && after.waiting() == 0 &&
           after.kv_free_tokens() == after.kv_capacity_tokens();
  })) << after.DebugString();
  EXPECT_LE(after.kv_cached_tokens(), after.kv_capacity_tokens());

  // Without --metrics-per-principal no series names a principal; the
  // rejections are counted by limit alone.
  const std::string m = ScrapeMetrics(s.metrics_port());
  EXPECT_EQ(m.find("principal=\""), std::string::npos) << "a principal label without the flag";
  EXPECT_EQ(MetricValue(m, "specline_request_rejections_total",
                        "{limit=\"max-kv-blocks-per-tenant\"}"),
            2);
}

// A full scheduler queue is the one scheduler limit a retry can get past
// (it drains as requests are admitted): its retry-after reaches the client
// through the gateway, as metadata and as HTTP's Retry-After.
TEST(TenantLimits, AFullQueuePassesOnTheSchedulersRetryAfter) {
  auto stack = StartStack(SlowModel(), 1,
                          {"--auth-token-file", TokenFile(), "--max-kv-blocks-per-tenant", "64",
                           "--max-waiting", "1"});
  const ServingStack& s = *stack;
  Outcome second, refused;
  HttpResult refused_http;
  std::thread second_thread;
  const Outcome held = Generate(s, "tok-alice", IgnoreEosIdRequest(4, 1000), [&](grpc::ClientContext& call) {
    // Alice at her KV limit: her next request takes the one queue place.
    second_thread = std::thread([&] { second = Generate(s, "tok-alice", IgnoreEosIdRequest(4, 20)); });
    EXPECT_TRUE(Eventually([&] { return SchedulerStats(s).waiting() == 1; }));
    refused = Generate(s, "tok-bob", IgnoreEosIdRequest(4, 20));
    refused_http = Completion(s, "tok-bob", 4, 8);
    call.TryCancel();
  });
  second_thread.join();
  EXPECT_EQ(held.status.error_code(), grpc::CANCELLED);
  EXPECT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(refused.status.error_code(), grpc::RESOURCE_EXHAUSTED) << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("--max-waiting"), std::string::npos)
      << refused.status.error_message();
  EXPECT_EQ(refused.retry_after, "1");
  EXPECT_EQ(refused_http.status, 429) << refused_http.body;
  EXPECT_EQ(refused_http.retry_after, "1");
  std::string m;
  EXPECT_TRUE(Eventually([&] {
    m = ScrapeMetrics(s.metrics_port());
    return MetricValueIfPresent(m, "specline_request_rejections_total",
                                "{limit=\"max-waiting\"}") == 2.0;
  })) << m;
}

}  // namespace
}  // namespace specline::testing
