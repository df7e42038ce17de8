// specline-gateway: the public gRPC endpoint (docs/serving.md).
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <pthread.h>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/flag_map.h"
#include "common/listen_error.h"
#include "common/stop_signals.h"
#include "services/gateway_server.h"

namespace {

const char kUsage[] = R"(usage: specline-gateway --model PATH --scheduler HOST:PORT [options]
  --model PATH                 model served (its config and tokenizer are read)
  --tokenizer PATH             tokenizer file (default: the model's own; none found
                               means token-id prompts only)
  --chat-template FILE         the chat template (Jinja, or JSON with "chat_template")
                               used instead of the model's own; --chat-template-file
                               is the same (llama-server's name)
  --tool-call-parser NAME      the syntax the model's tool calls are read back in on the
                               HTTP API: hermes (Hermes, Qwen2.5/3), llama3, mistral,
                               none, or auto (default: the one the chat template shows)
  --scheduler HOST:PORT        the scheduler's gRPC address
  --host ADDR                  listen address (default 0.0.0.0)
  --port N                     gRPC port (0 = pick; default 0)
  --metrics-port N             Prometheus /metrics port (0 = pick; default 0)
  --http-port N                the OpenAI-compatible HTTP/SSE API (/v1/completions,
                               /v1/chat/completions, /v1/responses, /v1/models,
                               /health); 0 = pick,
                               default off
  --cors-origins LIST          browser origins allowed to call the HTTP API (CORS):
                               comma-separated scheme://host[:port], or * for any;
                               default none (no Access-Control-* headers)
  --port-file PATH             write {"grpc":N,"metrics":M,"http":H,"pid":P} once listening
  --default-max-tokens N       max_tokens when a request gives 0 (default 256)
  --max-prompt-tokens N        longest prompt accepted (default: context length - 1)
  --max-concurrent-streams N   open Generate streams before RESOURCE_EXHAUSTED (default 256)
  --served-model-name NAME     the model's name in responses (default: the file's stem)
  --auth-token-file PATH       require "authorization: Bearer <token>" (health stays open);
                               one token per line, "NAME TOKEN" names its principal
  --max-streams-per-principal N  open streams one principal may hold (default: no cap)
  --cache-share-group NAME=P1,P2,...  principals whose requests share prefix-cache
                               blocks (repeatable; each principal in one group at
                               most). Default: each principal has its own
                               (docs/security.md)
  --max-tokens-per-minute-per-principal N  prompt + completion tokens one principal may
                               use per minute (a token bucket: a minute's worth at once,
                               then N a minute); beyond it RESOURCE_EXHAUSTED with
                               retry-after, HTTP 429 with Retry-After (default 0: none)
  --metrics-per-principal true|false  count requests, tokens and rejections on /metrics
                               with a principal label (default false)
  --accept-any-model true|false  answer a request naming any model with the served one,
                               as llama-server does (default false: 404 model_not_found,
                               as vLLM; docs/openai_api.md says why)
  --cluster-secret-file PATH   the internal plane's shared secret, sent to the scheduler
  --tls-cert PATH --tls-key PATH   serve TLS with this PEM certificate and key
  --drain-timeout-ms N         on SIGTERM, how long open streams may finish (default 30000)
  --log-level LEVEL            trace, debug, info (default), warn, error
)";

// The shared "--name value" / "--name=value" parser (common/flag_map.h).
bool ParseArgs(int argc, char** argv, specline::GatewayConfig* c) {
  if (specline::HelpRequested(argc, argv)) {
    std::cout << kUsage;
    std::exit(0);
  }
  auto parsed = specline::ParseFlagList(argc, argv);
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n" << kUsage;
    return false;
  }
  for (const auto& [name, v] : *parsed) {
    absl::Status st;
    if (name == "model") c->model_path = v;
    else if (name == "tokenizer") c->tokenizer_path = v;
    else if (name == "chat-template" || name == "chat-template-file") c->chat_template_path = v;
    else if (name == "tool-call-parser") c->tool_call_parser = v;
    else if (name == "scheduler") c->scheduler_addr = v;
    else if (name == "host") c->host = v;
    else if (name == "port") st = specline::ParseNumber(name, v, &c->port);
    else if (name == "metrics-port") st = specline::ParseNumber(name, v, &c->metrics_port);
    else if (name == "http-port") st = specline::ParseNumber(name, v, &c->http_port);
    else if (name == "port-file") c->port_file = v;
    else if (name == "default-max-tokens") st = specline::ParseNumber(name, v, &c->default_max_tokens);
    else if (name == "max-prompt-tokens") st = specline::ParseNumber(name, v, &c->max_prompt_tokens);
    else if (name == "max-concurrent-streams") st = specline::ParseNumber(name, v, &c->max_concurrent_streams);
    else if (name == "auth-token-file") c->auth_token_file = v;
    else if (name == "served-model-name") c->served_model_name = v;
    else if (name == "max-streams-per-principal") st = specline::ParseNumber(name, v, &c->max_streams_per_principal);
    else if (name == "cache-share-group") c->cache_share_groups.push_back(v);
    else if (name == "max-tokens-per-minute-per-principal") {
      st = specline::ParseNumber(name, v, &c->max_tokens_per_minute_per_principal);
      if (st.ok() && c->max_tokens_per_minute_per_principal < 0)
        st = absl::InvalidArgumentError("--max-tokens-per-minute-per-principal must be >= 0");
    }
    else if (name == "metrics-per-principal") st = specline::ParseBool(name, v, &c->metrics_per_principal);
    else if (name == "accept-any-model") st = specline::ParseBool(name, v, &c->accept_any_model);
    else if (name == "cluster-secret-file") c->cluster_secret_file = v;
    else if (name == "tls-cert") c->tls_cert = v;
    else if (name == "tls-key") c->tls_key = v;
    else if (name == "cors-origins") c->cors_origins = v;
    else if (name == "drain-timeout-ms") st = specline::ParseNumber(name, v, &c->drain_timeout_ms);
    else if (name == "log-level") spdlog::set_level(spdlog::level::from_str(v));
    else st = absl::InvalidArgumentError("unknown option: --" + name);
    if (!st.ok()) {
      std::cerr << st.message() << "\n" << kUsage;
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e [gateway] %l %v");
  sigset_t signals = specline::BlockStopSignals();
  try {
    specline::GatewayConfig config;
    if (!ParseArgs(argc, argv, &config)) return 2;
    specline::Gateway gateway(config);
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      spdlog::info("gateway: {} received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      gateway.Drain();
    });
    gateway.Wait();
    waiter.join();
    return 0;
  } catch (const specline::ListenError& e) {
    spdlog::error("{}", e.what());
    return specline::kExitCannotListen;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
