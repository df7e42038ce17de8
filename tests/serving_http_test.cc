// The OpenAI-compatible HTTP/SSE API of a real `specline serve` stack on
// loopback, driven over raw HTTP: the same greedy text and exact usage as
// the gRPC API, SSE framing, OpenAI error bodies, a client that disconnects
// mid-stream (its KV comes back), many concurrent streams, bearer auth and
// the drain on SIGTERM. Nothing here asserts on time.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

std::string Stories260K() { return SharedModelPath("stories260K/stories260K.bin"); }

// A random model (token-id prompts only) whose 2048-position context lets a
// stream outlive whatever the test does meanwhile.
std::string LongRandomModel() {
  static const std::string path = [] {
    const std::string p = TempDir() + "/random_2048.bin";
    WriteRandomModel(LlamaShape(64, 128, 4, 4, 2, 256, 2048), ModelFormat::kLlama2c, p, 7);
    return p;
  }();
  return path;
}

// Runs `action` with process `pid` stopped (SIGSTOP, then SIGCONT).
void WhileStoppedCheck(pid_t pid, const std::function<void()>& action) {
  const bool stopped = Kill(pid, SIGSTOP);
  EXPECT_TRUE(stopped) << "cannot stop " << pid;
  action();
  if (stopped) Kill(pid, SIGCONT);
}

// Polls the gateway until a request shows as running; false if none does.
bool WaitForRunningRequest(const ServingStack& stack) {
  for (int i = 0; i < 800; ++i) {
    const auto n = MetricValueIfPresent(ScrapeMetrics(stack.metrics_port()),
                                        "specline_num_requests_running");
    if (n && *n >= 1) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

int HttpPort(const ServingStack& s) { return s.ports["gateway"]["http"].get<int>(); }

json IdsPrompt(int n, int token = 5) { return json(std::vector<int>(n, token)); }

// A parsed SSE completion stream: the chunks, their concatenated text and
// what the framing rules say about it.
struct StreamedHttp {
  int status = 0;
  std::vector<json> chunks;  // every data: payload but [DONE]
  std::string text;
  std::string finish_reason;
  int finish_chunks = 0;   // chunks with a non-null finish_reason
  int usage_chunks = 0;    // chunks with usage (choices: [])
  json usage;
  bool done_last = false;  // "[DONE]" was the last event, and only there
  std::string error;
};

StreamedHttp Stream(int port, const std::string& target, const json& body) {
  StreamedHttp out;
  const HttpResult r = PostJson(port, target, body);
  out.status = r.status;
  if (r.status != 200) {
    out.error = r.body;
    return out;
  }
  EXPECT_EQ(r.content_type, "text/event-stream");
  EXPECT_TRUE(r.chunked);
  const SseEvents events = ParseSse(r.body);
  out.error = events.error;
  for (size_t i = 0; i < events.data.size(); ++i) {
    if (events.data[i] == "[DONE]") {
      out.done_last = i + 1 == events.data.size();
      continue;
    }
    json chunk = json::parse(events.data[i], nullptr, false);
    if (chunk.is_discarded()) {
      out.error = "not JSON: " + events.data[i];
      continue;
    }
    if (chunk.contains("error")) out.error = chunk.dump();
    if (chunk.contains("usage")) {
      ++out.usage_chunks;
      out.usage = chunk["usage"];
      EXPECT_TRUE(chunk["choices"].empty()) << chunk.dump();
    } else if (!chunk.contains("error")) {
      const json& choice = chunk["choices"].at(0);
      if (choice.contains("delta")) {
        out.text += choice["delta"].value("content", "");
      } else {
        out.text += choice["text"].get<std::string>();
      }
      if (!choice["finish_reason"].is_null()) {
        ++out.finish_chunks;
        out.finish_reason = choice["finish_reason"].get<std::string>();
      }
    }
    out.chunks.push_back(std::move(chunk));
  }
  return out;
}

TEST(ServingHttp, HealthModelsAndRoutes) {
  if (Stories260K().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(Stories260K(), 1);
  const int port = HttpPort(*stack);
  // Ready once the gateway has seen the pipeline up (it polls the scheduler).
  HttpResult health;
  for (int i = 0; i < 400 && health.status != 200; ++i) {
    health = HttpCall(port, "GET", "/health");
    if (health.status != 200) std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(health.Json()["status"], "ok");
  HttpResult models = HttpCall(port, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.Json()["object"], "list");
  EXPECT_EQ(models.Json()["data"][0]["id"], "stories260K");
  HttpResult nowhere = HttpCall(port, "GET", "/v2/anything");
  EXPECT_EQ(nowhere.status, 404);
  EXPECT_TRUE(nowhere.Json()["error"]["message"].is_string()) << nowhere.body;
  HttpResult wrong_method = HttpCall(port, "GET", "/v1/completions");
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_TRUE(wrong_method.Json()["error"]["message"].is_string()) << wrong_method.body;
}

// A repeated prompt reuses the prefix cache: the second response says how
// many prompt tokens came from it, OpenAI's way, and its text is the same.
TEST(ServingHttp, RepeatedPromptReportsCachedTokensAndTheSameText) {
  if (Stories260K().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(Stories260K(), 2);
  const int port = HttpPort(*stack);
  const json body = {{"model", "stories260K"},
                     {"prompt",
                      "Once upon a time there was a little girl named Lily. She loved to play "
                      "outside in the park with her friends. One day she saw a big red ball"},
                     {"max_tokens", 12},
                     {"temperature", 0}};
  const HttpResult first = PostJson(port, "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const json a = first.Json();
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const int prompt_tokens = a["usage"]["prompt_tokens"];
  ASSERT_GT(prompt_tokens, 16) << "the prompt must fill a KV block";
  const HttpResult second = PostJson(port, "/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  const json b = second.Json();
  EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);
  // Whole blocks of 16, never the last prompt token.
  const int cached = b["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_EQ(cached, (prompt_tokens - 1) / 16 * 16);
}

// The same greedy request through gRPC and through both HTTP shapes gives
// the same text, and usage counts every token exactly.
TEST(ServingHttp, GreedyCompletionEqualsGrpcWithExactUsage) {
  if (Stories260K().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(Stories260K(), 2);
  const int port = HttpPort(*stack);
  const std::string prompt = "Once upon a time";
  const int max_tokens = 40;

  v1::GenerateRequest grpc_req;
  grpc_req.set_text(prompt);
  grpc_req.set_max_tokens(max_tokens);
  const Streamed grpc = StreamOnce(stack->channel(), grpc_req);
  ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();
  ASSERT_FALSE(grpc.text.empty());
  const int prompt_tokens = grpc.last.usage().prompt_tokens();
  const int completion_tokens = static_cast<int>(grpc.tokens.size());
  const std::string finish = grpc.finish == v1::FINISH_REASON_LENGTH ? "length" : "stop";

  const json body = {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", max_tokens},
                     {"temperature", 0}};
  const HttpResult whole = PostJson(port, "/v1/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.content_type, "application/json");
  const json r = whole.Json();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "stories260K");
  EXPECT_EQ(r["choices"][0]["text"], grpc.text);
  EXPECT_EQ(r["choices"][0]["finish_reason"], finish);
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(r["usage"]["completion_tokens"], completion_tokens);
  EXPECT_EQ(r["usage"]["total_tokens"], prompt_tokens + completion_tokens);

  // Streamed without stream_options: no usage chunk, every chunk has a choice.
  json stream_body = body;
  stream_body["stream"] = true;
  const StreamedHttp plain = Stream(port, "/v1/completions", stream_body);
  ASSERT_EQ(plain.status, 200) << plain.error;
  EXPECT_TRUE(plain.error.empty()) << plain.error;
  EXPECT_EQ(plain.text, grpc.text);
  EXPECT_EQ(plain.finish_chunks, 1);
  EXPECT_EQ(plain.finish_reason, finish);
  EXPECT_EQ(plain.usage_chunks, 0);
  EXPECT_TRUE(plain.done_last);
  for (const json& c : plain.chunks) {
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["id"], plain.chunks[0]["id"]);
  }
  // The finish reason rides on the last choice chunk.
  EXPECT_FALSE(plain.chunks.back()["choices"][0]["finish_reason"].is_null());

  // With include_usage: one extra chunk, choices [], before [DONE].
  stream_body["stream_options"] = {{"include_usage", true}};
  const StreamedHttp counted = Stream(port, "/v1/completions", stream_body);
  ASSERT_EQ(counted.status, 200) << counted.error;
  EXPECT_EQ(counted.text, grpc.text);
  EXPECT_EQ(counted.usage_chunks, 1);
  EXPECT_TRUE(counted.chunks.back().contains("usage"));
  EXPECT_EQ(counted.usage["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(counted.usage["completion_tokens"], completion_tokens);
  EXPECT_EQ(counted.usage["total_tokens"], prompt_tokens + completion_tokens);
  EXPECT_TRUE(counted.done_last);

  // Token-id prompts: the same ids through gRPC and HTTP.
  std::vector<int32_t> ids = {1, 403, 407, 261, 378};
  v1::GenerateRequest ids_req;
  for (int32_t id : ids) ids_req.mutable_token_ids()->add_ids(id);
  ids_req.set_max_tokens(24);
  const Streamed grpc_ids = StreamOnce(stack->channel(), ids_req);
  ASSERT_TRUE(grpc_ids.status.ok()) << grpc_ids.status.error_message();
  const HttpResult http_ids =
      PostJson(port, "/v1/completions",
               {{"prompt", ids}, {"max_tokens", 24}, {"temperature", 0.0}});
  ASSERT_EQ(http_ids.status, 200) << http_ids.body;
  EXPECT_EQ(http_ids.Json()["choices"][0]["text"], grpc_ids.text);
  EXPECT_EQ(http_ids.Json()["usage"]["completion_tokens"], static_cast<int>(grpc_ids.tokens.size()));
}

// /health says whether requests can be served: 503 while a stage is down
// (the scheduler then fails requests with UNAVAILABLE), 200 once it is back.
TEST(ServingHttp, HealthFollowsThePipeline) {
  auto stack = StartStack(LongRandomModel(), 2);
  const int port = HttpPort(*stack);
  auto wait_for = [&](int status) {
    int got = 0;
    for (int i = 0; i < 800 && got != status; ++i) {
      got = HttpCall(port, "GET", "/health").status;
      if (got != status) std::this_thread::sleep_for(25ms);
    }
    return got;
  };
  EXPECT_EQ(wait_for(200), 200);
  const pid_t stage1 = stack->ports["stages"][1]["pid"].get<pid_t>();
  WhileStoppedCheck(stage1, [&] {
    // The scheduler's probe times out, the pipeline goes down, /health follows.
    EXPECT_EQ(wait_for(503), 503);
    EXPECT_EQ(HttpCall(port, "GET", "/health").Json()["status"], "pipeline not ready");
  });
  EXPECT_EQ(wait_for(200), 200);
  const HttpResult ok = PostJson(port, "/v1/completions", {{"prompt", IdsPrompt(4)}, {"max_tokens", 4}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// One keep-alive connection serves requests one after another, streamed
// and not, as clients' connection pools send them.
TEST(ServingHttp, KeepAliveConnectionServesSeveralRequests) {
  auto stack = StartStack(LongRandomModel(), 1);
  HttpConnection connection(HttpPort(*stack));
  const json body = {{"prompt", IdsPrompt(4)}, {"max_tokens", 6}, {"ignore_eos", true}};
  json streamed = body;
  streamed["stream"] = true;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    EXPECT_EQ(connection.Call("GET", "/v1/models").status, 200);
    const HttpResult whole = connection.Call("POST", "/v1/completions", body.dump());
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_EQ(whole.Json()["usage"]["completion_tokens"], 6);
    const HttpResult stream = connection.Call("POST", "/v1/completions", streamed.dump());
    ASSERT_EQ(stream.status, 200) << stream.body;
    const SseEvents events = ParseSse(stream.body);
    EXPECT_TRUE(events.error.empty()) << events.error;
    ASSERT_FALSE(events.data.empty());
    EXPECT_EQ(events.data.back(), "[DONE]");
    // A bad request does not close the connection either.
    EXPECT_EQ(connection.Call("POST", "/v1/completions", "{").status, 400);
  }
}

// Bad requests get OpenAI's error JSON with the right status and the field
// named; none of them disturbs the server.
TEST(ServingHttp, BadRequestsGetOpenAiErrors) {
  if (Stories260K().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(Stories260K(), 1);
  const int port = HttpPort(*stack);
  struct Case {
    std::string target, body, content_type;
    int status;
    std::string param;  // "" = null
  };
  const std::string completions = "/v1/completions", chat = "/v1/chat/completions";
  const std::vector<Case> cases = {
      {completions, "{\"prompt\": \"x\",", "application/json", 400, ""},
      {completions, "[1, 2]", "application/json", 400, ""},
      {completions, R"({"prompt": "x"})", "text/plain", 415, ""},
      {completions, R"({"prompt": "x", "max_tokens": 4, "colour": 1})", "application/json", 400, "colour"},
      {completions, R"({"max_tokens": 4})", "application/json", 400, "prompt"},
      {completions, R"({"prompt": "x", "n": 17})", "application/json", 400, "n"},
      {completions, R"({"prompt": "x", "logprobs": 21})", "application/json", 400, "logprobs"},
      {completions, R"({"prompt": "x", "frequency_penalty": 2.5})", "application/json", 400,
       "frequency_penalty"},
      {completions, R"({"prompt": "x", "presence_penalty": -3})", "application/json", 400,
       "presence_penalty"},
      {completions, R"({"prompt": "x", "logit_bias": {"99999999": 1}})", "application/json", 400,
       "logit_bias"},
      {completions, R"({"prompt": "x", "top_p": 1.5})", "application/json", 400, "top_p"},
      {completions, R"({"prompt": "x", "temperature": "hot"})", "application/json", 400,
       "temperature"},
      {completions, R"({"prompt": "x", "max_tokens": -1})", "application/json", 400, "max_tokens"},
      {completions, R"({"prompt": "x", "stream_options": {"include_usage": true}})",
       "application/json", 400, "stream_options"},
      {completions, R"({"prompt": "x", "policy": "warp"})", "application/json", 400, "policy"},
      {completions, R"({"prompt": [1, 2, 999999]})", "application/json", 400, "prompt"},
      {completions, R"({"prompt": "x", "model": "gpt-4"})", "application/json", 404, "model"},
      {chat, R"({"messages": []})", "application/json", 400, "messages"},
      {chat, R"({"messages": [{"role": "robot", "content": "x"}]})", "application/json", 400,
       "messages[0].role"},
      // stories260K has no chat template.
      {chat, R"({"messages": [{"role": "user", "content": "hi"}]})", "application/json", 400,
       "messages"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const HttpResult r = HttpCall(port, "POST", c.target, c.body, {{"Content-Type", c.content_type}});
    EXPECT_EQ(r.status, c.status) << r.body;
    const json e = r.Json();
    ASSERT_TRUE(e.contains("error")) << r.body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    EXPECT_TRUE(e["error"]["type"].is_string());
    if (c.param.empty()) {
      EXPECT_TRUE(e["error"]["param"].is_null()) << r.body;
    } else {
      EXPECT_EQ(e["error"]["param"], c.param) << r.body;
    }
  }
  // A base model's chat refusal says how to give it a template.
  const HttpResult base = PostJson(port, chat, {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_NE(base.body.find("--chat-template"), std::string::npos) << base.body;
  // A body over the limit (1 MiB) is refused before it is parsed.
  const std::string huge = "{\"prompt\": \"" + std::string(1100000, 'a') + "\"}";
  EXPECT_EQ(HttpCall(port, "POST", completions, huge).status, 413);
  // Still serving.
  const HttpResult ok = PostJson(port, completions, {{"prompt", "Once"}, {"max_tokens", 4}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// A client that goes away mid-stream cancels its request: the scheduler
// frees its KV, as it does for a gRPC cancel.
TEST(ServingHttp, DisconnectMidStreamFreesKv) {
  auto stack = StartStack(LongRandomModel(), 2);
  const int port = HttpPort(*stack);
  const int64_t initial = SchedulerStats(*stack).kv_free_tokens();
  const std::string before = ScrapeMetrics(stack->metrics_port());

  const int fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  const std::string body =
      json{{"prompt", IdsPrompt(40)}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}}
          .dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string seen;
  char buf[4096];
  while (seen.find("data: ") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof buf);
    ASSERT_GT(n, 0) << "the stream ended before its first event: " << seen;
    seen.append(buf, n);
  }
  // With stage 0 stopped the stream cannot finish before the gateway sees
  // the disconnect (the failure counter says it did).
  const pid_t stage0 = stack->ports["stages"][0]["pid"].get<pid_t>();
  double cancelled = 0;
  WhileStoppedCheck(stage0, [&] {
    close(fd);
    for (int i = 0; i < 400 && cancelled < 1; ++i) {
      const std::string labels = "{code=\"CANCELLED\"}";
      cancelled = MetricValueIfPresent(ScrapeMetrics(stack->metrics_port()),
                                       "specline_request_failure_total", labels)
                      .value_or(0) -
                  MetricValueIfPresent(before, "specline_request_failure_total", labels).value_or(0);
      if (cancelled < 1) std::this_thread::sleep_for(25ms);
    }
  });
  EXPECT_EQ(cancelled, 1) << "the gateway did not cancel the request";
  internal::SchedulerStats s;
  for (int i = 0; i < 200; ++i) {
    s = SchedulerStats(*stack);
    if (s.kv_free_tokens() == initial && s.running() == 0 && s.waiting() == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(s.kv_free_tokens(), initial);
  EXPECT_EQ(s.running(), 0);
  EXPECT_EQ(MetricValue(ScrapeMetrics(stack->metrics_port()), "specline_num_requests_running"), 0);
}

// 200 streams at once: every one ends with its tokens, usage and [DONE].
TEST(ServingHttp, TwoHundredConcurrentStreams) {
  auto stack = StartStack(LongRandomModel(), 2, {"--max-waiting", "512"});
  const int port = HttpPort(*stack);
  constexpr int kStreams = 200, kTokens = 8;
  std::vector<StreamedHttp> results(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      results[i] = Stream(port, "/v1/completions",
                          {{"prompt", IdsPrompt(4, 3 + i % 50)},
                           {"max_tokens", kTokens},
                           {"ignore_eos", true},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}}});
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(results[i].status, 200) << results[i].error;
    EXPECT_TRUE(results[i].error.empty()) << results[i].error;
    EXPECT_TRUE(results[i].done_last);
    EXPECT_EQ(results[i].finish_reason, "length");
    EXPECT_EQ(results[i].usage["completion_tokens"], kTokens);
  }
  EXPECT_EQ(MetricValue(ScrapeMetrics(stack->metrics_port()), "specline_num_requests_running"), 0);
}

TEST(ServingHttp, BearerTokenIsRequired) {
  const std::string token_file = TempDir() + "/token";
  std::ofstream(token_file) << "s3cret-token\n";
  auto stack = StartStack(LongRandomModel(), 1, {"--auth-token-file", token_file});
  const int port = HttpPort(*stack);
  EXPECT_EQ(HttpCall(port, "GET", "/health").status, 200);  // probes need no token
  const HttpResult models = HttpCall(port, "GET", "/v1/models");
  EXPECT_EQ(models.status, 401);
  EXPECT_EQ(models.Json()["error"]["type"], "authentication_error") << models.body;
  const json body = {{"prompt", IdsPrompt(4)}, {"max_tokens", 4}};
  EXPECT_EQ(PostJson(port, "/v1/completions", body).status, 401);
  EXPECT_EQ(PostJson(port, "/v1/completions", body, {{"Authorization", "Bearer guess"}}).status, 401);
  const HttpResult ok =
      PostJson(port, "/v1/completions", body, {{"Authorization", "Bearer s3cret-token"}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.Json()["usage"]["completion_tokens"], 4);
}

// --tls-cert/--tls-key serve the HTTP API over TLS as they do gRPC: a client
// trusting the certificate streams, a plain-HTTP client gets nothing.
TEST(ServingHttp, TlsServesHttps) {
  const std::string dir = TempDir();
  if (!MakeTestCertificate(dir)) GTEST_SKIP() << "openssl is not available to make a test certificate";
  if (std::system("curl --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "curl is not installed";
  auto stack = StartStack(LongRandomModel(), 1,
                          {"--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"});
  const std::string base = "https://127.0.0.1:" + std::to_string(HttpPort(*stack));
  const std::string curl = "curl -sS --max-time 60 --cacert " + dir + "/cert.pem ";
  // With TLS the launcher cannot probe /health itself: wait for the gateway
  // to have seen the pipeline up.
  json health = json::object();
  for (int i = 0; i < 400 && health.value("status", "") != "ok"; ++i) {
    EXPECT_EQ(std::system((curl + base + "/health > " + dir + "/health.txt 2>&1").c_str()), 0)
        << ReadFile(dir + "/health.txt");
    health = json::parse(ReadFile(dir + "/health.txt"), nullptr, false);
    if (!health.is_object()) health = json::object();
    if (health.value("status", "") != "ok") std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(health["status"], "ok");
  const std::string body = json{{"prompt", IdsPrompt(4)}, {"max_tokens", 5}, {"ignore_eos", true},
                                {"stream", true}, {"stream_options", {{"include_usage", true}}}}
                               .dump();
  std::ofstream(dir + "/body.json") << body;
  ASSERT_EQ(std::system((curl + "-N -H 'Content-Type: application/json' --data @" + dir + "/body.json " +
                         base + "/v1/completions > " + dir + "/sse.txt 2>&1")
                            .c_str()),
            0)
      << ReadFile(dir + "/sse.txt");
  const SseEvents events = ParseSse(ReadFile(dir + "/sse.txt"));
  EXPECT_TRUE(events.error.empty()) << events.error;
  ASSERT_GE(events.data.size(), 2u);
  EXPECT_EQ(events.data.back(), "[DONE]");
  EXPECT_EQ(json::parse(events.data[events.data.size() - 2])["usage"]["completion_tokens"], 5);
  // Plain HTTP to the TLS port gets no HTTP answer.
  EXPECT_EQ(HttpCall(HttpPort(*stack), "GET", "/health").status, 0);
}

// SIGTERM drains: /health turns 503 and an open SSE stream still gets all
// its tokens and [DONE]. Stage 0 is stopped from the first token until the
// drain has begun, so the stream is open when it does.
TEST(ServingHttp, DrainFinishesOpenStreams) {
  auto stack = StartStack(LongRandomModel(), 1);
  const int port = HttpPort(*stack);
  constexpr int kTokens = 300;
  StreamedHttp result;
  std::thread client([&] {
    result = Stream(port, "/v1/completions",
                    {{"prompt", IdsPrompt(8)},
                     {"max_tokens", kTokens},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}});
  });
  const pid_t stage0 = stack->ports["stages"][0]["pid"].get<pid_t>();
  const bool running = WaitForRunningRequest(*stack);
  bool draining = false;
  if (running) {
    WhileStoppedCheck(stage0, [&] {
      EXPECT_TRUE(Kill(stack->launcher.pid(), SIGTERM));
      for (int i = 0; i < 400 && !draining; ++i) {
        draining = HttpCall(port, "GET", "/health").status == 503;
        if (!draining) std::this_thread::sleep_for(25ms);
      }
    });
  }
  client.join();
  ASSERT_TRUE(running) << "the request never showed as running";
  EXPECT_TRUE(draining) << "/health did not turn 503 during the drain";
  EXPECT_EQ(result.status, 200) << result.error;
  EXPECT_TRUE(result.error.empty()) << result.error;
  EXPECT_TRUE(result.done_last);
  EXPECT_EQ(result.finish_reason, "length");
  EXPECT_EQ(result.usage["completion_tokens"], kTokens);
}

// A stream that cannot finish within --drain-timeout-ms still ends exactly
// once: an error event, then [DONE]. Stage 0 is stopped for the whole drain.
TEST(ServingHttp, DrainTimeoutEndsOpenStreamsOnce) {
  auto stack = StartStack(LongRandomModel(), 1, {"--drain-timeout-ms", "300"});
  const int port = HttpPort(*stack);
  StreamedHttp result;
  std::thread client([&] {
    result = Stream(port, "/v1/completions",
                    {{"prompt", IdsPrompt(8)}, {"max_tokens", 2000}, {"ignore_eos", true},
                     {"stream", true}});
  });
  const pid_t stage0 = stack->ports["stages"][0]["pid"].get<pid_t>();
  const bool running = WaitForRunningRequest(*stack);
  if (!running) client.join();  // nothing to drain; the stream ends by itself
  ASSERT_TRUE(running) << "the request never showed as running";
  WhileStoppedCheck(stage0, [&] {
    EXPECT_TRUE(Kill(stack->launcher.pid(), SIGTERM));
    client.join();  // the drain must end the stream although stage 0 is stopped
  });
  EXPECT_EQ(result.status, 200);
  EXPECT_FALSE(result.error.empty()) << "the stream ended without an error event";
  EXPECT_TRUE(result.done_last);
  EXPECT_EQ(result.finish_chunks, 0);
}

}  // namespace
}  // namespace specline::testing
