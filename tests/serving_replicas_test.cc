// Past one pipeline: `specline serve --replicas 2 --router P`, two whole
// pipelines behind vllm-router (PyPI, the vLLM project's router; set-up
// installs it into ~/.cache/specline/router-venv), driven as users drive it:
// the official openai package through the router, requests spread over the
// replicas, a replica's gateway killed under load (its streams end once
// each, new requests go to the other replica, it rejoins), kv_aware on the
// KV events the replicas publish, and the demo.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "loadtest/openai_client.h"
#include "tests/http_test_client.h"
#include "tests/openai_python.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

// One `specline serve --replicas N` process and the ports it reported:
// {"router": {"http", ...}, "replicas": [<a pipeline's port file>, ...]}.
struct Replicas {
  ChildProcess serve;
  nlohmann::json ports;
  std::string port_file;

  int router_port() const { return ports["router"]["http"].get<int>(); }
  const nlohmann::json& gateway(int i) const { return ports["replicas"][i]["gateway"]; }
  std::shared_ptr<grpc::Channel> channel(int i) const {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(gateway(i)["grpc"].get<int>()),
                               grpc::InsecureChannelCredentials());
  }
  // Requests replica i's gateway finished normally, either API.
  double Served(int i) const {
    return MetricValueIfPresent(ScrapeMetrics(gateway(i)["metrics"].get<int>()),
                                "specline_request_success_total")
        .value_or(0);
  }
};

std::unique_ptr<Replicas> StartReplicas(const std::string& model, const std::string& policy,
                                        std::vector<std::string> extra = {}) {
  auto r = std::make_unique<Replicas>();
  const std::string dir = TempDir();
  r->port_file = dir + "/serve.json";
  std::vector<std::string> argv = {BinaryPath("specline"), "serve", "--model", model,
                                   "--replicas", "2", "--stages", "1", "--router", policy,
                                   "--router-health-interval-s", "1", "--port", "0",
                                   "--threads", "1", "--port-file", r->port_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  r->serve = ChildProcess(argv, dir + "/serve.log");
  r->ports = r->serve.WaitForPortFile(r->port_file, 180s);
  EXPECT_EQ(r->ports["replicas"].size(), 2u);
  EXPECT_EQ(r->ports["router"]["policy"], policy);
  return r;
}

std::string Stories260K() {
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  EXPECT_FALSE(model.empty()) << "../shared/models/stories260K absent";
  return model;
}

// The openai package through the router: completions and chat, streamed
// and not, text equal to one replica's gRPC answer, exact usage; the router
// first renders each request at the replica (vLLM's render endpoints) and
// adds vLLM's and SGLang's fields to every body it forwards.
TEST(ServingReplicas, OpenAiPackageThroughVllmRouter) {
  const std::string model = Stories260K();
  ASSERT_FALSE(model.empty());
  auto r = StartReplicas(model, "cache_aware", {"--chat-template", RoleColonChatTemplate()});
  CheckOpenAiPackage(r->channel(0), r->router_port(), "stories260K", /*chat=*/true);
  // The models list passes through as the replicas give it.
  const nlohmann::json models = HttpCall(r->router_port(), "GET", "/v1/models").Json();
  ASSERT_TRUE(models.contains("data")) << models.dump();
  EXPECT_EQ(models["data"][0]["id"], "stories260K");
  // cache_aware places plain requests by the token ids the replicas'
  // render endpoints give it (without them it falls back to least-load
  // routing and counts outcome="missing_tokens"; requests with options it
  // does not prepare, such as logprobs or n, and bodies a replica refuses
  // are counted apart, so only plain ones are counted here).
  const int router_metrics = r->ports["router"]["metrics"].get<int>();
  const std::string before = ScrapeMetrics(router_metrics);
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    const nlohmann::json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me story " + n}}}},
                                 {"max_tokens", 2}};
    ASSERT_EQ(PostJson(r->router_port(), "/v1/chat/completions", chat).status, 200);
    const nlohmann::json completion = {{"prompt", "Once upon a time " + n}, {"max_tokens", 2}};
    ASSERT_EQ(PostJson(r->router_port(), "/v1/completions", completion).status, 200);
  }
  const std::string after = ScrapeMetrics(router_metrics);
  const char* kDecisions = "vllm_router_prefix_routing_decisions_total";
  EXPECT_GE(MetricDelta(before, after, "vllm_router_kv_routing_inputs_total", "{result=\"render\"}"), 6)
      << after;
  EXPECT_EQ(MetricValueIfPresent(after, kDecisions, "{outcome=\"missing_tokens\"}").value_or(0),
            MetricValueIfPresent(before, kDecisions, "{outcome=\"missing_tokens\"}").value_or(0))
      << after;
}

// round_robin sends requests to both replicas; each one's gateway counts
// what it served.
TEST(ServingReplicas, RoundRobinSpreadsRequestsOverTheReplicas) {
  const std::string model = Stories260K();
  ASSERT_FALSE(model.empty());
  auto r = StartReplicas(model, "round_robin");
  for (int i = 0; i < 6; ++i) {
    const HttpResult res = PostJson(r->router_port(), "/v1/completions",
                                    {{"model", "stories260K"}, {"prompt", "Once upon a time"},
                                     {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(res.status, 200) << res.body;
  }
  EXPECT_GE(r->Served(0), 2) << "replica 0 got too few of 6 round-robin requests";
  EXPECT_GE(r->Served(1), 2) << "replica 1 got too few of 6 round-robin requests";
}

// Streams of `tokens` tokens each through the router, from their own
// threads; Start returns once every stream has its first token (or failed).
struct RouterStreams {
  std::vector<loadtest::RequestRecord> records;
  std::vector<std::thread> clients;
  std::atomic<int> started{0};

  void Start(int port, int n, int tokens) {
    records.resize(n);
    for (int i = 0; i < n; ++i) {
      clients.emplace_back([this, port, tokens, i] {
        loadtest::OpenAiTarget target;
        target.port = port;
        std::atomic<bool> first{false};
        target.on_text = [&](const std::string&) {
          if (!first.exchange(true)) ++started;
        };
        loadtest::ClientOptions options;
        options.timeout = 120;  // a hung stream shows as DEADLINE_EXCEEDED, not a hung test
        loadtest::WorkItem item;
        item.text = "Once upon a time";
        item.max_tokens = tokens;
        item.ignore_eos = true;
        records[i] = loadtest::OpenAiSender(target, options)(i, item, loadtest::Clock::now());
        if (!first) ++started;  // failed before its first token: do not wait for it
      });
    }
    while (started < n) std::this_thread::sleep_for(10ms);
  }
  void Join() {
    for (std::thread& t : clients) t.join();
    clients.clear();
  }
  // After Join: every stream ran to its `tokens` without an error.
  void ExpectAllComplete(int tokens) const {
    for (const loadtest::RequestRecord& rec : records) {
      EXPECT_TRUE(rec.ok) << rec.status_code << ": " << rec.error;
      EXPECT_EQ(rec.output_tokens, tokens);
    }
  }
};

// Sends `n` short completions through the router; each must succeed.
void ExpectEveryRequestServed(int router_port, int n, const std::string& when) {
  for (int i = 0; i < n; ++i) {
    const HttpResult res =
        PostJson(router_port, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 2}});
    EXPECT_EQ(res.status, 200) << "request " << i << " " << when << ": " << res.body;
  }
}

// Whether replica i, started again by the launcher on its ports, gets
// requests through the router again once the router's health checks see
// it (a fresh gateway counts from 0).
bool Rejoins(const Replicas& r, int i) {
  if (!WaitForHttpHealth(r.gateway(i)["http"].get<int>(), 60)) return false;
  for (int attempt = 0; attempt < 40; ++attempt) {
    ExpectEveryRequestServed(r.router_port(), 1, "while replica " + std::to_string(i) + " rejoins");
    if (r.Served(i) >= 1) return true;
    std::this_thread::sleep_for(250ms);
  }
  return false;
}

// A replica's gateway killed while streams run on both replicas: every
// stream ends exactly once (those on the dead replica with an error, the
// others complete), requests sent right after all succeed, and once the
// launcher has restarted the gateway the router sends it requests again.
TEST(ServingReplicas, AKilledReplicaIsRoutedAroundAndRejoins) {
  // The default model: slow enough on one core that 400 tokens outlive the
  // kill, and with a tokenizer, so each stream's first token is seen.
  const std::string model = SmolLm2Path();
  ASSERT_FALSE(model.empty());
  auto r = StartReplicas(model, "round_robin");
  const int kStreams = 4, kTokens = 400;
  RouterStreams streams;
  streams.Start(r->router_port(), kStreams, kTokens);
  const int dead = 1;
  ASSERT_TRUE(Kill(r->gateway(dead)["pid"].get<int>(), SIGKILL));
  streams.Join();
  int completed = 0, failed = 0;
  for (const loadtest::RequestRecord& rec : streams.records) {
    EXPECT_NE(rec.status_code, "DEADLINE_EXCEEDED") << "a stream hung after its replica died";
    if (rec.ok) {
      ++completed;
      EXPECT_EQ(rec.output_tokens, kTokens);
      EXPECT_EQ(rec.finish_reason, "length");
    } else {
      ++failed;
      std::printf("a stream of the killed replica ended: %s (%s) after %d tokens\n",
                  rec.status_code.c_str(), rec.error.c_str(), rec.output_tokens);
    }
  }
  EXPECT_GE(completed, 1) << "the streams of the live replica must complete";
  EXPECT_GE(failed, 1) << "the dead replica's streams cannot have completed";

  // Right after the kill, before the replica is back: no request fails.
  ExpectEveryRequestServed(r->router_port(), 4, "after the kill");
  EXPECT_TRUE(Rejoins(*r, dead)) << "the restarted replica got no request through the router";
}

// A rolling restart, one replica at a time as a rolling update does it:
// SIGTERM to a replica's gateway while streams run on both. It drains (its
// /health says 503, its open streams finish), the router sends new requests
// to the other one, no request fails, and it rejoins once restarted.
TEST(ServingReplicas, ARollingRestartOfAReplicaFailsNoRequest) {
  const std::string model = SmolLm2Path();
  ASSERT_FALSE(model.empty());
  auto r = StartReplicas(model, "round_robin");
  const int kStreams = 4, kTokens = 200;
  RouterStreams streams;
  streams.Start(r->router_port(), kStreams, kTokens);
  const int restarted = 1;
  ASSERT_TRUE(Kill(r->gateway(restarted)["pid"].get<int>(), SIGTERM));
  ExpectEveryRequestServed(r->router_port(), 6, "during the drain");
  streams.Join();
  streams.ExpectAllComplete(kTokens);
  EXPECT_TRUE(Rejoins(*r, restarted)) << "the restarted replica got no request through the router";
}

// Principals behind the router: it forwards each client's bearer token to
// the replica (generation and the render call it routes on), so a request
// without one is refused there, and each principal's prefix-cache scope
// holds on every replica: alice's repeated prompt, placed on the replica
// that already holds it (cache_aware), hits her cached blocks, while bob's
// same prompt, placed there too, finds none of them.
TEST(ServingReplicas, PrincipalsKeepTheirTokensAndCacheScopesBehindTheRouter) {
  const std::string model = Stories260K();
  ASSERT_FALSE(model.empty());
  const std::string tokens = TempDir() + "/principals";
  std::ofstream(tokens) << "alice tok-alice\nbob tok-bob\n";
  auto r = StartReplicas(model, "cache_aware", {"--auth-token-file", tokens});
  std::string prompt = "Once upon a time";
  for (int i = 0; i < 12; ++i) prompt += " there was a little girl who liked to play in the park";
  const nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
  const auto as = [](const std::string& token) {
    return std::map<std::string, std::string>{{"Authorization", "Bearer " + token}};
  };
  EXPECT_EQ(PostJson(r->router_port(), "/v1/completions", body).status, 401);
  EXPECT_EQ(PostJson(r->router_port(), "/v1/completions", body, as("tok-mallory")).status, 401);
  const auto cached = [](const HttpResult& res) {
    return res.Json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  const HttpResult first = PostJson(r->router_port(), "/v1/completions", body, as("tok-alice"));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(cached(first), 0);
  const HttpResult again = PostJson(r->router_port(), "/v1/completions", body, as("tok-alice"));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_GT(cached(again), 0) << "alice's repeat went to the replica without her blocks";
  const HttpResult bob = PostJson(r->router_port(), "/v1/completions", body, as("tok-bob"));
  ASSERT_EQ(bob.status, 200) << bob.body;
  EXPECT_EQ(cached(bob), 0) << "bob was served from alice's cached blocks";
  EXPECT_EQ(bob.Json()["choices"][0]["text"], first.Json()["choices"][0]["text"]);
  // All three on one replica: bob's miss is the scope's, not the placement's.
  EXPECT_TRUE(Eventually([&] { return std::max(r->Served(0), r->Served(1)) == 3; }, 10s))
      << "served: " << r->Served(0) << " and " << r->Served(1);
}

// kv_aware: each replica's scheduler publishes its prefix cache's KV
// events (vLLM's ZeroMQ + MessagePack format; the gateway says where on
// GET /kv_event_sources) and vllm-router indexes them. Two prompts are
// cached behind the router's back, one on each replica (sent to the
// gateways directly); their follow-ups through the router then go to the
// replica holding their blocks, which the router can only know from the
// events: it counts index hits, and each follow-up finds its prefix cached.
TEST(ServingReplicas, KvAwarePlacesRequestsOnTheBlocksEachReplicaPublished) {
  const std::string model = Stories260K();
  ASSERT_FALSE(model.empty());
  auto r = StartReplicas(model, "kv_aware");
  const HttpResult sources = HttpCall(r->gateway(0)["http"].get<int>(), "GET", "/kv_event_sources");
  ASSERT_EQ(sources.status, 200) << sources.body;
  EXPECT_EQ(sources.Json()["0"]["publisher"], "zmq") << sources.body;
  EXPECT_TRUE(sources.Json()["0"]["endpoint"].get<std::string>().starts_with("tcp://127.0.0.1:"))
      << sources.body;

  const auto story = [](const std::string& opening) {
    std::string prompt = opening;
    for (int i = 0; i < 10; ++i) prompt += " and they walked to the big tree in the garden";
    return prompt;
  };
  const std::string prompts[2] = {story("Once upon a time there was a cat"),
                                  story("One day a little dog found a ball")};
  const auto body = [](const std::string& prompt) {
    return nlohmann::json{{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
  };
  // Prompt i cached on replica i only.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(PostJson(r->gateway(i)["http"].get<int>(), "/v1/completions", body(prompts[i])).status, 200);
  }
  const int router_metrics = r->ports["router"]["metrics"].get<int>();
  const auto hits = [&] {
    return MetricValueIfPresent(ScrapeMetrics(router_metrics), "vllm_router_kv_placement_lookups_total",
                                "{result=\"hit\"}")
        .value_or(0);
  };
  // The events reach the router's index a moment after the blocks are
  // cached: follow-ups of prompt 0 until the router counts a hit.
  int follow_ups = 0;
  ASSERT_TRUE(Eventually([&] {
    const HttpResult res = PostJson(r->router_port(), "/v1/completions",
                                    body(prompts[0] + " again " + std::to_string(follow_ups++)));
    EXPECT_EQ(res.status, 200) << res.body;
    return hits() > 0;
  }, 30s)) << "vllm-router never found a published block:\n" << ScrapeMetrics(router_metrics);
  const double served[2] = {r->Served(0), r->Served(1)};
  for (int n = 0; n < 3; ++n) {
    for (int i = 0; i < 2; ++i) {
      const HttpResult res = PostJson(r->router_port(), "/v1/completions",
                                      body(prompts[i] + " then " + std::to_string(n)));
      ASSERT_EQ(res.status, 200) << res.body;
      EXPECT_GT(res.Json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0)
          << "follow-up " << n << " of prompt " << i << " went to the replica without its blocks";
    }
  }
  // Three follow-ups each, all on the replica that holds their prompt.
  EXPECT_TRUE(Eventually([&] { return r->Served(0) == served[0] + 3 && r->Served(1) == served[1] + 3; }, 10s))
      << "served: " << r->Served(0) - served[0] << " and " << r->Served(1) - served[1];
}

// SIGTERM to `specline serve --replicas 2` with streams open: the router
// stops taking requests but finishes the streams it forwards, each
// replica's gateway drains, and serve exits 0.
TEST(ServingReplicas, ShutdownFinishesTheOpenStreams) {
  const std::string model = SmolLm2Path();
  ASSERT_FALSE(model.empty());
  auto r = StartReplicas(model, "round_robin");
  const int kStreams = 2, kTokens = 150;
  RouterStreams streams;
  streams.Start(r->router_port(), kStreams, kTokens);
  ASSERT_TRUE(Kill(r->ports["pid"].get<int>(), SIGTERM));
  streams.Join();
  streams.ExpectAllComplete(kTokens);
  EXPECT_EQ(r->serve.Wait(60s), 0);
}

// `specline serve --replicas 2 --demo-prompt`: the generation streams
// through the router and the process exits 0.
TEST(ServingReplicas, DemoStreamsThroughTheRouter) {
  const std::string model = Stories260K();
  ASSERT_FALSE(model.empty());
  const std::string dir = TempDir();
  ChildProcess serve({BinaryPath("specline"), "serve", "--model", model, "--replicas", "2", "--stages", "1",
                      "--port", "0", "--threads", "1", "--demo-prompt", "Once upon a time",
                      "--max-tokens", "16", "--ignore-eos"},
                     dir + "/demo.log");
  EXPECT_EQ(serve.Wait(180s), 0) << ReadFile(dir + "/demo.log");
  const std::string log = ReadFile(dir + "/demo.log");
  EXPECT_NE(log.find("Once upon a time"), std::string::npos) << log;
  EXPECT_NE(log.find("2 replicas of 1 stage processes behind vllm-router"), std::string::npos) << log;
  EXPECT_NE(log.find("16 tokens"), std::string::npos) << log;
}

}  // namespace
}  // namespace specline::testing
