// `specline serve`: the whole distributed pipeline on localhost (gateway,
// scheduler, N stage workers as processes), or --replicas of it behind
// vllm-router, supervised until SIGINT/SIGTERM; or, with --demo-prompt, one
// streamed generation through it and exit.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include <grpcpp/create_channel.h>
#include <spdlog/spdlog.h>

#include "common/stop_signals.h"

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/http_demo.h"
#include "cli/replica_set.h"
#include "cli/request_flags.h"
#include "cli/stream_client.h"
#include "scheduler/policies/registry.h"

namespace specline::cli {
namespace {

const char kServeUsage[] = R"(usage: specline serve [options]
  --model PATH             model to serve (default: as for `specline generate`)
  --tokenizer PATH         tokenizer file (default: the model's own)
  --chat-template FILE     chat template (Jinja) instead of the model's own
  --tool-call-parser NAME  tool-call syntax on the HTTP API: auto (default: the chat
                           template's), hermes, llama3, mistral, none
  --stages N               stage worker processes, layers split evenly (default 2)
  --replicas N             whole pipelines (default 1); more than one run behind
                           --router, which then takes --host and --http-port
  --router POLICY          vllm-router in front of the replicas (default cache_aware
                           when --replicas > 1; none = no router): cache_aware,
                           kv_aware (routes on the KV events each replica publishes),
                           round_robin, random, power_of_two, consistent_hash,
                           sticky_least_loaded (docs/routers.md)
  --router-binary PATH     vllm-router to run (default: $SPECLINE_VLLM_ROUTER, the
                           set-up's ~/.cache/specline/router-venv, then PATH)
  --router-health-interval-s N   how often the router checks each replica (default 2)
  --host ADDR              gateway listen address (default 127.0.0.1)
  --port N                 gateway gRPC port (default 50051; 0 = pick)
  --metrics-port N         gateway /metrics port (default: pick)
  --http-port N            gateway OpenAI-compatible HTTP/SSE API (/v1/completions,
                           /v1/chat/completions, /v1/responses, /v1/models, /health);
                           default 8000,
                           or a picked port when --port is 0; -1 = off
  --threads N              compute threads per process (default: cores / stages)
  --device D               cpu (default), cuda (stage i on GPU i % GPUs; the
                           scheduler's output head on GPU 0) or cuda:N
  --dtype T                GPU weights/activations: bf16 (default) or f16
  --kv-capacity-tokens N   KV positions per stage (default: each process's default)
  --max-waiting N          scheduler queue limit (RESOURCE_EXHAUSTED beyond)
  --prefix-cache on|off    reuse the KV of prompt prefixes requests share (default on)
  --kv-events-config JSON  publish the prefix cache's KV events (vLLM's KVEventsConfig;
                           set by --router kv_aware; docs/routers.md "KV events")
  --max-concurrent-streams N   gateway stream limit
  --default-max-tokens N   gateway default for max_tokens
  --drain-timeout-ms N     how long open streams may finish at shutdown (default 10000)
  --auth-token-file PATH   bearer tokens the gateway accepts, one per line
                           ("NAME TOKEN" names the principal that owns its requests)
  --max-streams-per-principal N   open streams one principal may hold
  --cache-share-group NAME=P1,P2,...   principals that share prefix-cache blocks
                           (repeatable; default: each principal its own; docs/security.md)
  --max-tokens-per-minute-per-principal N   prompt + completion tokens one principal
                           may use per minute (HTTP 429 / RESOURCE_EXHAUSTED with
                           Retry-After beyond; default 0: no quota)
  --metrics-per-principal true   label the gateway's request, token and rejection
                           counts by principal on /metrics (default false)
  --accept-any-model true  answer requests naming any model with the served one, as
                           llama-server does (default false: a 404 for another name)
  --admission fair|fifo    the scheduler's waiting queue: round robin across
                           principals (default) or first come, first served
  --max-kv-blocks-per-tenant N   KV blocks one principal's running requests may hold
                           (default 0: no limit)
  --served-model-name NAME the model's name in API responses (default: the file's stem)
  --retry-window-ms N      a request a pipeline failure caught before its first
                           token restarts if the pipeline is back within N ms
                           (default 5000; 0 = fail it at once)
  --max-attempts N         runs of such a request at most (default 3)
  --tls-cert PATH --tls-key PATH   serve TLS at the gateway
  --cors-origins LIST      browser origins allowed to call the HTTP API (comma list
                           of scheme://host[:port], or *); default none
  --port-file PATH         write every process's ports and pids as JSON
  --startup-timeout-s N    how long start-up may take (default 300)
  --log-level LEVEL        for every process: debug, info, warn, error
                           (default info; warn with --demo-prompt)
  --demo-prompt TEXT       once ready, stream one generation to stdout, print
                           TTFT/TPOT/tok-s to stderr, shut down and exit
)";

}  // namespace

int ServeCommand(int argc, char** argv) {
  std::vector<std::string> options = kRequestOptions;
  options.insert(options.end(),
                 {"model", "tokenizer", "chat-template", "tool-call-parser", "stages", "host", "port", "metrics-port", "http-port", "threads",
                  "kv-capacity-tokens", "max-waiting", "max-concurrent-streams",
                  "default-max-tokens", "drain-timeout-ms", "auth-token-file", "tls-cert",
                  "tls-key", "cors-origins", "port-file", "startup-timeout-s", "demo-prompt", "log-level",
                  "device", "dtype", "retry-window-ms", "max-attempts", "max-streams-per-principal",
                  "prefix-cache", "kv-events-config", "served-model-name", "cache-share-group",
                  "max-tokens-per-minute-per-principal", "metrics-per-principal", "accept-any-model", "admission",
                  "max-kv-blocks-per-tenant", "replicas", "router", "router-binary",
                  "router-health-interval-s"});
  // The policies' flags, as they declare them (scheduler/policies/registry.h).
  const std::vector<scheduler::PolicyFlag> policy_flags = scheduler::AllPolicyFlags();
  for (const scheduler::PolicyFlag& f : policy_flags) options.push_back(f.name);
  std::vector<std::string> flags = kRequestFlags;
  flags.push_back("help");
  Args args(argc, argv, 2, options, flags);
  if (args.Has("help")) {
    std::cout << kServeUsage << "Speculation and decoding policies (the scheduler's):\n"
              << scheduler::PolicyFlagUsage(policy_flags, 27)
              << "Request options for --demo-prompt:\n"
              << kRequestUsage;
    return 0;
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e [serve] %l %v");
  LaunchConfig c;
  launch::Topology& t = c.topology;
  t.model = args.Str("model", DefaultModelPath());
  if (t.model.empty()) {
    std::cerr << "no model: pass --model, or run scripts/setup.sh to fetch the default\n";
    return 2;
  }
  t.stages = args.Int("stages", 2);
  c.threads = args.Int("threads", 0);
  t.kv_capacity_tokens = args.Int("kv-capacity-tokens", 0);
  t.max_waiting = args.Int("max-waiting", 0);
  c.port_file = args.Str("port-file");
  t.device = args.Str("device");
  t.dtype = args.Str("dtype");
  // The heads the stages load too go through the topology, which gives each
  // process its part.
  t.ptp_head = args.Str("ptp-head");
  t.pipo_head = args.Str("pipo-head");
  std::vector<std::string> forwarded = {"retry-window-ms", "max-attempts", "prefix-cache",
                                        "admission", "max-kv-blocks-per-tenant",
                                        "kv-events-config"};
  for (const scheduler::PolicyFlag& f : policy_flags) {
    if (!f.stages_too) forwarded.push_back(f.name);
  }
  for (const std::string& name : forwarded) {
    if (args.Has(name)) {
      t.scheduler_args.insert(t.scheduler_args.end(), {"--" + name, args.Str(name)});
    }
  }
  // The scheduler waits for its stages quietly as long as start-up may take.
  if (args.Has("startup-timeout-s")) {
    t.scheduler_args.insert(t.scheduler_args.end(),
                            {"--stage-startup-timeout-s", args.Str("startup-timeout-s")});
  }
  launch::GatewayOptions& g = t.gateway.emplace();
  g.tokenizer = args.Str("tokenizer");
  // Absolute: the gateway process may not share this working directory.
  if (args.Has("chat-template"))
    g.chat_template = std::filesystem::absolute(args.Str("chat-template")).string();
  g.tool_call_parser = args.Str("tool-call-parser");
  g.host = args.Str("host", "127.0.0.1");
  g.port = args.Int("port", 50051);
  g.metrics_port = args.Int("metrics-port", 0);
  // vLLM's and llama-server's habit: 8000; tests that pick the gRPC port
  // (--port 0) get a picked HTTP port too, so parallel servers never collide.
  g.http_port = args.Int("http-port", g.port == 0 ? 0 : 8000);
  g.max_concurrent_streams = args.Int("max-concurrent-streams", 0);
  g.default_max_tokens = args.Int("default-max-tokens", 0);
  g.drain_timeout_ms = args.Int("drain-timeout-ms", 10000);
  g.auth_token_file = args.Str("auth-token-file");
  g.served_model_name = args.Str("served-model-name");
  g.max_streams_per_principal = args.Int("max-streams-per-principal", 0);
  g.cache_share_groups = args.All("cache-share-group");
  g.max_tokens_per_minute_per_principal = args.Int("max-tokens-per-minute-per-principal", 0);
  const std::string per_principal = args.Str("metrics-per-principal", "false");
  g.metrics_per_principal = per_principal == "true" || per_principal == "1";
  const std::string any_model = args.Str("accept-any-model", "false");
  g.accept_any_model = any_model == "true" || any_model == "1";
  g.tls_cert = args.Str("tls-cert");
  g.tls_key = args.Str("tls-key");
  g.cors_origins = args.Str("cors-origins");
  const bool demo = args.Has("demo-prompt");
  // A demo shows the generation, so the processes only speak up for
  // warnings unless asked otherwise.
  t.log_level = args.Str("log-level", demo ? "warn" : "");
  if (!t.log_level.empty()) spdlog::set_level(spdlog::level::from_str(t.log_level));
  v1::GenerateRequest demo_request;
  if (demo) demo_request = RequestFromArgs(args, "demo-prompt");

  ReplicaSetConfig rc;
  rc.replica = c;
  rc.replicas = args.Int("replicas", 1);
  rc.port_file = c.port_file;
  const std::string router = args.Str("router", rc.replicas > 1 ? "cache_aware" : "none");
  if (router != "none") {
    launch::RouterOptions& o = rc.router.emplace();
    o.policy = router;
    o.health_check_interval_s = args.Int("router-health-interval-s", 2);
    o.log_level = t.log_level;
    try {
      o.binary = launch::FindRouterBinary(args.Str("router-binary"));
      launch::RouterArgv(o, {0});  // an unknown policy fails here, before anything starts
    } catch (const std::exception& e) {
      std::cerr << "serve: " << e.what() << "\n";
      return 2;
    }
  }

  // Shutdown signals are taken synchronously by the loop below.
  const sigset_t signals = BlockStopSignals();

  std::optional<ReplicaSet> deployment;
  try {
    deployment.emplace(std::move(rc));
    deployment->Start(std::chrono::seconds(args.Int("startup-timeout-s", 300)));
  } catch (const std::exception& e) {
    spdlog::error("serve: {}", e.what());
    if (deployment) deployment->Shutdown();
    return 1;
  }

  // The demo runs beside the supervision loop (which must stay on this
  // thread: the children are tied to it).
  std::atomic<bool> demo_done{false};
  int demo_rc = 0;
  std::thread demo_thread;
  if (demo && deployment->has_router()) {
    const std::string label = "specline serve: " + std::to_string(deployment->replicas()) +
                              " replicas of " + std::to_string(t.stages) +
                              " stage processes behind vllm-router";
    demo_thread = std::thread([&, label] {
      try {
        demo_rc = StreamDemoOverHttp(deployment->http_port(), demo_request, label);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "demo: %s\n", e.what());
        demo_rc = 1;
      }
      demo_done = true;
    });
  } else if (demo) {
    demo_thread = std::thread([&] {
      auto channel = grpc::CreateChannel(deployment->gateway_address(), grpc::InsecureChannelCredentials());
      if (demo_request.has_text()) std::fputs(demo_request.text().c_str(), stdout);
      StreamResult r = StreamGenerate(channel, demo_request, StreamOptions{}, [](const std::string& t) {
        std::fputs(t.c_str(), stdout);
        std::fflush(stdout);
      });
      std::fputs("\n", stdout);
      std::fflush(stdout);
      if (r.status.ok()) {
        std::fprintf(stderr, "[specline serve: %d stage processes] %s\n", t.stages,
                     FormatStats(r).c_str());
      } else {
        std::fprintf(stderr, "demo generation failed: %d %s\n", r.status.error_code(),
                     r.status.error_message().c_str());
        demo_rc = 1;
      }
      demo_done = true;
    });
  }

  const timespec tick{0, 50 * 1000 * 1000};
  while (!demo_done) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("serve: {} received; shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
    deployment->Supervise();
  }
  deployment->Shutdown();  // the gateways drain: a running demo stream finishes first
  if (demo_thread.joinable()) demo_thread.join();
  return demo_rc;
}

}  // namespace specline::cli
