// What routers and endpoint pickers read of a replica besides its API
// (docs/metrics.md, "vLLM's names"), on a live `specline serve`: vLLM's
// series on GET /metrics of the HTTP API's port, as gauges labelled with
// the served model; vllm:cache_config_info's labels equal to the
// scheduler's own KV block size and block count; the waiting and running
// gauges and the KV usage following requests the scheduler really holds
// (a long request in flight, a second one queued behind it for KV); and
// the block size and count on /get_server_info. Progress is polled,
// never timed.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

// 4096 positions of context and of KV: one request can hold nearly all.
constexpr int kKvCapacity = 4096;
const char kModelLabel[] = "{model_name=\"slow-model\"}";

// The value of label `name` on the first sample of `series` (a name of
// letters, '_' and ':', none special in a regex); "" if none.
std::string LabelOf(const std::string& text, const std::string& series, const std::string& name) {
  std::smatch m;
  const std::regex line("(^|\n)" + series + "\\{([^}]*)\\}");
  if (!std::regex_search(text, m, line)) return "";
  const std::string labels = m[2];
  std::smatch v;
  if (!std::regex_search(labels, v, std::regex("(^|,)" + name + "=\"([^\"]*)\""))) return "";
  return v[2];
}

class RouterMetrics : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    stack_ = StartStack(SlowServingModel(kKvCapacity, /*seed=*/39), 1,
                        {"--kv-capacity-tokens", std::to_string(kKvCapacity)})
                 .release();
    ready_ = WaitForHttpHealth(Http());
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(ready_) << "the gateway did not answer GET /health with 200 within 60 s";
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }
  // GET /metrics on the API port, as the endpoint picker scrapes it.
  static std::string Scrape() {
    const HttpResult r = HttpCall(Http(), "GET", "/metrics");
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  }
  static ServingStack* stack_;
  static bool ready_;
};
ServingStack* RouterMetrics::stack_ = nullptr;
bool RouterMetrics::ready_ = false;

TEST_F(RouterMetrics, VllmSeriesAreGaugesWithTheSchedulersKvPool) {
  const HttpResult r = HttpCall(Http(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type.rfind("text/plain", 0), 0u) << r.content_type;
  for (const char* name : {"vllm:num_requests_waiting", "vllm:num_requests_running",
                           "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                           "vllm:cache_config_info"}) {
    EXPECT_NE(r.body.find(std::string("# TYPE ") + name + " gauge\n"), std::string::npos)
        << name << " is not a gauge in:\n" << r.body;
  }
  // Labelled as vLLM labels them: the served model's name.
  for (const char* name : {"vllm:num_requests_waiting", "vllm:num_requests_running",
                           "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}) {
    EXPECT_TRUE(MetricValueIfPresent(r.body, name, kModelLabel)) << name << " in:\n" << r.body;
  }

  // The block size and count are the scheduler's own.
  const internal::SchedulerStats stats = SchedulerStats(*stack_);
  ASSERT_GT(stats.kv_block_size(), 0);
  ASSERT_EQ(stats.kv_capacity_tokens(), kKvCapacity);
  const int64_t blocks = kKvCapacity / stats.kv_block_size();
  EXPECT_EQ(LabelOf(r.body, "vllm:cache_config_info", "block_size"),
            std::to_string(stats.kv_block_size()))
      << r.body;
  EXPECT_EQ(LabelOf(r.body, "vllm:cache_config_info", "num_gpu_blocks"), std::to_string(blocks))
      << r.body;
  EXPECT_EQ(MetricValue(r.body, "vllm:cache_config_info"), 1);

  // ... and /get_server_info carries them for vllm-router's kv_aware.
  const HttpResult info = HttpCall(Http(), "GET", "/get_server_info");
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_EQ(info.Json()["block_size"], stats.kv_block_size()) << info.body;
  EXPECT_EQ(info.Json()["num_gpu_blocks"], blocks) << info.body;

  // The gateway's metrics port keeps specline's names only (promtool's
  // lint refuses the colons of vLLM's).
  EXPECT_EQ(ScrapeMetrics(stack_->metrics_port()).find("vllm:"), std::string::npos);
  EXPECT_EQ(HttpCall(Http(), "POST", "/metrics").status, 405);
}

// A long request holds most of the KV pool; a second one, which does not
// fit beside it, waits in the scheduler's queue until the first is
// cancelled. The gauges say so while it lasts, and come back to idle.
TEST_F(RouterMetrics, WaitingRunningAndKvUsageFollowRequestsInFlight) {
  auto idle = [] {
    const std::string m = Scrape();
    return MetricValueIfPresent(m, "vllm:num_requests_running") == 0.0 &&
           MetricValueIfPresent(m, "vllm:num_requests_waiting") == 0.0 &&
           MetricValueIfPresent(m, "vllm:kv_cache_usage_perc") == 0.0;
  };
  ASSERT_TRUE(Eventually(idle)) << Scrape();

  auto stub = v1::Generation::NewStub(stack_->channel());
  grpc::ClientContext call;
  // 4 + 4000 positions: 251 of the 256 blocks, reserved at admission.
  auto reader = stub->Generate(&call, IgnoreEosIdRequest(4, 4000));
  v1::GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first)) << "the long request ended before its first token";

  std::string m;
  EXPECT_TRUE(Eventually([&] {
    m = Scrape();
    return MetricValueIfPresent(m, "vllm:num_requests_running") >= 1.0 &&
           MetricValueIfPresent(m, "vllm:kv_cache_usage_perc") > 0.0;
  })) << m;

  // 7 blocks more than the 5 left: it queues behind the long one.
  grpc::Status second_status;
  std::thread second(
      [&] { second_status = StreamOnce(stack_->channel(), IgnoreEosIdRequest(4, 100)).status; });
  EXPECT_TRUE(Eventually([&] {
    m = Scrape();
    return MetricValueIfPresent(m, "vllm:num_requests_waiting") == 1.0;
  })) << m;
  EXPECT_EQ(MetricValue(m, "vllm:num_requests_running", kModelLabel), 1) << m;
  const double usage = MetricValue(m, "vllm:kv_cache_usage_perc", kModelLabel);
  EXPECT_GT(usage, 0.0);
  EXPECT_LE(usage, 1.0);
  // The scheduler's own count of what is handed out, unchanged while the
  // long request holds its blocks and the other waits.
  const internal::SchedulerStats held = SchedulerStats(*stack_);
  EXPECT_EQ(held.waiting(), 1);
  EXPECT_DOUBLE_EQ(usage, 1.0 - static_cast<double>(held.kv_free_tokens()) / held.kv_capacity_tokens());
  EXPECT_EQ(MetricValue(m, "vllm:gpu_cache_usage_perc", kModelLabel), usage);

  call.TryCancel();  // the long request ends; the queued one runs
  while (reader->Read(&first)) {
  }
  second.join();
  EXPECT_TRUE(second_status.ok()) << second_status.error_message();
  EXPECT_TRUE(Eventually(idle)) << Scrape();
}

}  // namespace
}  // namespace specline::testing
