// The distributed serving path end to end: `specline serve` starts the
// gateway, the scheduler and 2 or 4 stage workers as separate processes on
// loopback; the tests talk to the gateway over gRPC like any client and
// compare with the single-process engine (LocalPipeline + Generate).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <future>
#include <random>

#include "model/formats/random_model.h"
#include "services/health_check.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

std::string Stories260K() { return SharedModelPath("stories260K/stories260K.bin"); }

// A small random model (no tokenizer: token-id prompts), so the path is
// tested without ../shared too; written once per context length.
std::string RandomModelWithContext(int context) {
  static std::mutex mu;
  static std::map<int, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = paths.emplace(context, TempDir() + "/random_" + std::to_string(context) + ".bin");
  if (fresh) WriteRandomModel(LlamaShape(64, 128, 4, 4, 2, 256, context), ModelFormat::kLlama2c, it->second, 7);
  return it->second;
}

std::string RandomModel() { return RandomModelWithContext(256); }

// Streams that must still be running when the test cancels, aborts or
// kills them run up to 2000 tokens, and the test pauses stage 0 while it
// acts (WhileStopped), so they cannot finish first.
std::string LongContextRandomModel() { return RandomModelWithContext(2048); }

// Runs `action` with process `pid` stopped (SIGSTOP, then SIGCONT): with
// stage 0 stopped no stream advances past the batches already beyond it, so
// what the action does to a running stream cannot race the stream's end.
void WhileStopped(pid_t pid, const std::function<void()>& action) {
  const bool stopped = Kill(pid, SIGSTOP);
  EXPECT_TRUE(stopped) << "cannot stop " << pid;
  action();
  if (stopped) Kill(pid, SIGCONT);
}

v1::GenerateRequest TextRequest(const std::string& text, int max_tokens) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.set_max_tokens(max_tokens);
  return r;
}

v1::GenerateRequest IdsRequest(const std::vector<int32_t>& ids, int max_tokens) {
  v1::GenerateRequest r;
  for (int32_t id : ids) r.mutable_token_ids()->add_ids(id);
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  return r;
}

// Greedy text prompts through `stages` processes equal the in-process engine.
void ExpectGreedyTextMatches(int stages) {
  if (Stories260K().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(Stories260K(), stages);
  ReferenceEngine ref(Stories260K());
  for (const std::string prompt : {"Once upon a time", "The cat sat", "Lily and Ben went to the park. "}) {
    const Reference want = ref.Run(ref.EncodeText(prompt), 80, false);
    const Streamed got = StreamOnce(stack->channel(), TextRequest(prompt, 80));
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.tokens, want.tokens) << prompt;
    EXPECT_EQ(got.text, want.text) << prompt;
    EXPECT_NE(got.finish, v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_EQ(got.last.usage().completion_tokens(), static_cast<int>(want.tokens.size()));
    EXPECT_TRUE(got.last.lossless());
  }
}

TEST(ServingE2E, GreedyTextEqualsSingleProcessTwoStages) { ExpectGreedyTextMatches(2); }
TEST(ServingE2E, GreedyTextEqualsSingleProcessFourStages) { ExpectGreedyTextMatches(4); }

// 64 concurrent streams, prompt lengths 1..~120: each equals its
// single-process result. Runs on the random model (no ../shared needed),
// through 2 and 4 stage processes.
void ExpectConcurrentMatches(int stages) {
  auto stack = StartStack(RandomModel(), stages);
  ReferenceEngine ref(RandomModel());
  std::mt19937 rng(42);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < 64; ++i) {
    std::vector<int32_t> p((i * 37) % 120 + 1);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % 256);
    prompts.push_back(p);
    max_tokens.push_back(8 + (i * 13) % 24);
  }
  std::vector<std::future<Streamed>> futures;
  auto channel = stack->channel();
  for (int i = 0; i < 64; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return StreamOnce(channel, IdsRequest(prompts[i], max_tokens[i]));
    }));
  }
  for (int i = 0; i < 64; ++i) {
    const Streamed got = futures[i].get();
    ASSERT_TRUE(got.status.ok()) << "stream " << i << ": " << got.status.error_message();
    EXPECT_EQ(got.tokens, ref.Run(prompts[i], max_tokens[i], true).tokens) << "stream " << i;
    EXPECT_EQ(got.finish, v1::FINISH_REASON_LENGTH);
  }
}

TEST(ServingE2E, SixtyFourConcurrentStreamsTwoStages) { ExpectConcurrentMatches(2); }
TEST(ServingE2E, SixtyFourConcurrentStreamsFourStages) { ExpectConcurrentMatches(4); }

// Malformed requests: INVALID_ARGUMENT naming the field, and nothing changes
// (KV capacity, scheduler counters); a good request still works afterwards.
TEST(ServingE2E, MalformedRequestsAreInvalidArgument) {
  const bool text = !Stories260K().empty();
  const std::string model = text ? Stories260K() : RandomModel();
  auto stack = StartStack(model, 2, {"--default-max-tokens", "16"});
  const auto before = SchedulerStats(*stack);
  auto good = [&] { return text ? TextRequest("Once", 4) : IdsRequest({1, 2, 3}, 4); };
  struct Case {
    std::string field;
    std::function<void(v1::GenerateRequest&)> edit;
  };
  std::vector<Case> cases = {
      {"prompt", [](auto& r) { r.clear_prompt(); }},
      {"prompt.token_ids", [](auto& r) { r.mutable_token_ids(); }},
      {"prompt.token_ids", [](auto& r) { r.mutable_token_ids()->add_ids(1 << 20); }},
      {"prompt.token_ids", [](auto& r) { r.mutable_token_ids()->add_ids(-1); }},
      {"prompt", [](auto& r) {  // oversize: longer than the context
         for (int i = 0; i < 600; ++i) r.mutable_token_ids()->add_ids(1);
       }},
      {"sampling.temperature", [](auto& r) { r.mutable_sampling()->set_temperature(-1); }},
      {"sampling.top_p", [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); }},
      {"sampling.top_k", [](auto& r) { r.mutable_sampling()->set_top_k(-3); }},
      {"sampling.min_p", [](auto& r) { r.mutable_sampling()->set_min_p(-0.1f); }},
      {"sampling.repetition_penalty",
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(-2); }},
      {"max_tokens", [](auto& r) { r.set_max_tokens(-5); }},
      {"policy", [](auto& r) { r.set_policy(static_cast<v1::DecodingPolicy>(99)); }},
      {"pipo_tau", [](auto& r) { r.set_pipo_tau(-1); }},
      {"pipo_tau", [](auto& r) {  // a threshold for a policy that has none
         r.set_policy(v1::DECODING_POLICY_AUTOREGRESSIVE);
         r.set_pipo_tau(0.5f);
       }},
      {"stop_token_ids[0]", [](auto& r) { r.add_stop_token_ids(100000); }},
      {"stop", [](auto& r) {
         // A std::string, not "x": add_stop(const char*) inlines into GCC 12's
         // -Wrestrict false positive at -O3.
         for (int i = 0; i < 40; ++i) r.add_stop(std::string(1, 'x'));
       }},
      {"stop[0]", [](auto& r) { r.add_stop(std::string(1000, 'a')); }},
  };
  if (text) {
    cases.push_back({"prompt.text", [](auto& r) { r.set_text(""); }});
    cases.push_back({"prompt.chat", [](auto& r) {  // stories260K has no chat template
                       auto* m = r.mutable_chat()->add_messages();
                       m->set_role("user");
                       m->set_content("hi");
                     }});
  }
  auto channel = stack->channel();
  for (const Case& c : cases) {
    v1::GenerateRequest r = good();
    if (c.field.rfind("prompt", 0) == 0 && c.field != "prompt.text" && c.field != "prompt.chat") {
      r.clear_prompt();
    }
    c.edit(r);
    if (c.field == "prompt.token_ids" && r.token_ids().ids_size() == 0) r.mutable_token_ids();
    const Streamed got = StreamOnce(channel, r);
    EXPECT_EQ(got.status.error_code(), grpc::INVALID_ARGUMENT) << c.field << ": " << got.status.error_message();
    EXPECT_NE(got.status.error_message().find(c.field), std::string::npos)
        << "message should name " << c.field << ": " << got.status.error_message();
    EXPECT_TRUE(got.tokens.empty());
  }
  const auto after = SchedulerStats(*stack);
  EXPECT_EQ(after.kv_free_tokens(), before.kv_free_tokens());
  EXPECT_EQ(after.running(), 0);
  EXPECT_EQ(after.waiting(), 0);
  const Streamed ok = StreamOnce(channel, good());
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
}

// Polls until the scheduler holds no request and all KV is free again.
void ExpectKvReturns(const ServingStack& stack, int64_t initial) {
  internal::SchedulerStats s;
  for (int i = 0; i < 200; ++i) {
    s = SchedulerStats(stack);
    if (s.kv_free_tokens() == initial && s.running() == 0 && s.waiting() == 0) return;
    std::this_thread::sleep_for(50ms);
  }
  ADD_FAILURE() << "KV not returned: free " << s.kv_free_tokens() << " of " << initial
                << ", running " << s.running() << ", waiting " << s.waiting();
}

// A cancelled stream, a stream past its deadline and an aborted one each
// free their KV. Each must have been admitted first (it sent a token), or
// the KV check would hold trivially.
TEST(ServingE2E, CancelledAndDeadlineExceededStreamsFreeTheirKv) {
  auto stack = StartStack(LongContextRandomModel(), 2);
  const int64_t initial = SchedulerStats(*stack).kv_free_tokens();
  auto channel = stack->channel();
  std::vector<int32_t> prompt(40, 5);
  constexpr int kLong = 2000;
  // Cancel and Abort act while stage 0 is paused (SIGSTOP after the first
  // token, SIGCONT once the cancel or abort has taken effect), so the stream
  // cannot finish first however fast the pipeline or slow this thread.
  const pid_t stage0 = stack->ports["stages"][0]["pid"].get<pid_t>();
  auto paused = [&](const std::function<void()>& action) { WhileStopped(stage0, action); };

  const Streamed cancelled =
      StreamOnce(channel, IdsRequest(prompt, kLong), std::nullopt,
                 [&](grpc::ClientContext& ctx) { paused([&] { ctx.TryCancel(); }); });
  EXPECT_EQ(cancelled.status.error_code(), grpc::CANCELLED) << cancelled.status.error_message();
  EXPECT_FALSE(cancelled.tokens.empty()) << "cancelled before it was admitted";
  ExpectKvReturns(*stack, initial);

  // Deadline: it must expire after the first token and before the end. No
  // fixed deadline does that on every machine, so try 30 ms, 60 ms, ...:
  // too short and the stream gets no token (KV must come back all the same),
  // too long and it completes (then halve). 2000 tokens take far longer than
  // the first, so a few tries find one.
  std::chrono::milliseconds deadline(30);
  bool expired_mid_stream = false;
  for (int attempt = 0; attempt < 16 && !expired_mid_stream; ++attempt) {
    const Streamed late = StreamOnce(channel, IdsRequest(prompt, kLong), deadline);
    if (late.status.ok()) {
      deadline /= 2;
    } else {
      EXPECT_EQ(late.status.error_code(), grpc::DEADLINE_EXCEEDED) << late.status.error_message();
      if (late.tokens.empty()) deadline *= 2;
      expired_mid_stream = !late.tokens.empty();
      if (expired_mid_stream) {
        std::printf("[ deadline ] %lld ms expired after %zu of %d tokens\n",
                    static_cast<long long>(deadline.count()), late.tokens.size(), kLong);
      }
    }
    ExpectKvReturns(*stack, initial);
  }
  EXPECT_TRUE(expired_mid_stream) << "no deadline expired between the first token and the end";

  // Abort by id: the stream ends normally with finish reason ABORT.
  v1::GenerateRequest req = IdsRequest(prompt, kLong);
  req.set_request_id("abort-me");
  const Streamed aborted = StreamOnce(channel, req, std::nullopt, [&](grpc::ClientContext&) {
    grpc::Status st;
    v1::AbortResponse resp;
    paused([&] {
      auto stub = v1::Generation::NewStub(channel);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 30s);
      v1::AbortRequest a;
      a.set_request_id("abort-me");
      st = stub->Abort(&ctx, a, &resp);
    });
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(resp.found());
  });
  EXPECT_TRUE(aborted.status.ok()) << aborted.status.error_message();
  EXPECT_EQ(aborted.finish, v1::FINISH_REASON_ABORT);
  EXPECT_LT(aborted.tokens.size(), static_cast<size_t>(kLong));
  ExpectKvReturns(*stack, initial);
}

// Killing a stage worker mid-stream: the stream ends with UNAVAILABLE and a
// message, the gateway keeps answering health checks, and once the launcher
// has restarted the worker new requests succeed.
TEST(ServingE2E, KilledStageEndsStreamsUnavailableAndRecovers) {
  auto stack = StartStack(LongContextRandomModel(), 2);
  auto channel = stack->channel();
  const pid_t victim = stack->ports["stages"][1]["pid"].get<pid_t>();
  std::vector<int32_t> prompt(20, 9);
  const pid_t stage0 = stack->ports["stages"][0]["pid"].get<pid_t>();
  const Streamed broken =
      StreamOnce(channel, IdsRequest(prompt, 2000), std::nullopt, [&](grpc::ClientContext&) {
        WhileStopped(stage0, [&] { EXPECT_TRUE(Kill(victim, SIGKILL)); });
      });
  EXPECT_EQ(broken.status.error_code(), grpc::UNAVAILABLE)
      << broken.status.error_code() << " " << broken.status.error_message();
  EXPECT_FALSE(broken.status.error_message().empty());

  HealthState health;
  ASSERT_TRUE(CheckHealth(channel, "", 5s, &health).ok());
  EXPECT_EQ(health, HealthState::kServing);

  // Wait for the restart (a new pid in the launcher's port file), then for
  // the pipeline to take requests again.
  bool restarted = false;
  for (int i = 0; i < 400 && !restarted; ++i) {
    std::this_thread::sleep_for(50ms);
    try {
      restarted = stack->Reload()["stages"][1]["pid"].get<pid_t>() != victim;
    } catch (const std::exception&) {
    }
  }
  ASSERT_TRUE(restarted) << "the launcher did not restart stage 1";
  Streamed ok;
  for (int i = 0; i < 300; ++i) {
    ok = StreamOnce(channel, IdsRequest(prompt, 8));
    if (ok.status.ok()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  ReferenceEngine ref(LongContextRandomModel());
  EXPECT_EQ(ok.tokens, ref.Run(prompt, 8, true).tokens);
}

// /metrics counts what was sent, and passes `promtool check metrics`.
TEST(ServingE2E, MetricsCountRequestsAndPassPromtool) {
  auto stack = StartStack(RandomModel(), 2);
  auto channel = stack->channel();
  const std::string before = ScrapeMetrics(stack->metrics_port());
  ASSERT_FALSE(before.empty());
  int tokens = 0, prompt_tokens = 0;
  const int n = 5;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(3 + i, 11);
    const Streamed got = StreamOnce(channel, IdsRequest(prompt, 6 + i));
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    tokens += static_cast<int>(got.tokens.size());
    prompt_tokens += static_cast<int>(prompt.size());
  }
  const Streamed bad = StreamOnce(channel, IdsRequest({1 << 20}, 4));
  ASSERT_EQ(bad.status.error_code(), grpc::INVALID_ARGUMENT);
  const std::string after = ScrapeMetrics(stack->metrics_port());
  auto delta = [&](const std::string& name, const std::string& labels = "") {
    return MetricDelta(before, after, name, labels);
  };
  EXPECT_EQ(delta("specline_e2e_request_latency_seconds_count"), n);
  EXPECT_EQ(delta("specline_time_to_first_token_seconds_count"), n);
  EXPECT_EQ(delta("specline_request_queue_time_seconds_count"), n);
  EXPECT_EQ(delta("specline_request_time_per_output_token_seconds_count"), n);
  // ITL: one observation per token after the first of each request.
  EXPECT_EQ(delta("specline_inter_token_latency_seconds_count"), tokens - n);
  EXPECT_EQ(delta("specline_generation_tokens_total"), tokens);
  EXPECT_EQ(delta("specline_prompt_tokens_total"), prompt_tokens);
  EXPECT_EQ(delta("specline_request_success_total", "{finished_reason=\"length\"}"), n);
  EXPECT_EQ(delta("specline_request_failure_total", "{code=\"INVALID_ARGUMENT\"}"), 1);
  EXPECT_EQ(MetricValue(after, "specline_num_requests_running"), 0);

  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus); format not checked";
  }
  const std::string file = TempDir() + "/metrics.txt";
  {
    std::ofstream out(file);
    out << after;
  }
  const std::string cmd = "promtool check metrics < " + file + " > " + file + ".out 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << ReadFile(file + ".out");
}

// SIGTERM: the gateway drains (an open stream completes), then everything
// exits cleanly.
TEST(ServingE2E, SigtermDrainsAndExitsCleanly) {
  auto stack = StartStack(RandomModel(), 2);
  auto channel = stack->channel();
  std::vector<int32_t> prompt(10, 3);
  // SIGTERM while stage 0 is stopped: the stream is surely still open when
  // the drain starts.
  const pid_t stage0 = stack->ports["stages"][0]["pid"].get<pid_t>();
  const Streamed got = StreamOnce(channel, IdsRequest(prompt, 100), std::nullopt,
                                  [&](grpc::ClientContext&) {
                                    WhileStopped(stage0, [&] { stack->launcher.Kill(SIGTERM); });
                                  });
  EXPECT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens.size(), 100u);
  EXPECT_EQ(stack->launcher.Wait(60s), 0);
}

}  // namespace
}  // namespace specline::testing
