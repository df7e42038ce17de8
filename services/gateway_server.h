// Assembles the gateway process: model and tokenizer info, the gRPC server
// (Generation + grpc.health.v1 + reflection, optional TLS and bearer auth),
// the OpenAI HTTP API (services/openai/), the /metrics exposer, the port
// file, and the graceful drain.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include <grpcpp/server.h>

#include "model/tokenizer/tokenizer.h"
#include "services/gateway_metrics.h"
#include "services/generation_service.h"
#include "services/openai/http_server.h"

namespace specline {

struct GatewayConfig {
  std::string model_path;
  std::string tokenizer_path;  // "" = the model's own (none found: token ids only)
  std::string chat_template_path;  // "" = the model's own template
  // --tool-call-parser: the syntax tool calls are parsed in ("auto": the
  // one the chat template shows; hermes, llama3, mistral, none).
  std::string tool_call_parser = "auto";
  std::string scheduler_addr;  // host:port
  std::string host = "0.0.0.0";
  int port = 0;          // 0 = pick
  int metrics_port = 0;  // 0 = pick
  int http_port = -1;    // the OpenAI HTTP API: -1 = off, 0 = pick
  std::string port_file;
  int default_max_tokens = 256;
  int max_prompt_tokens = 0;  // 0 = context length - 1
  int max_concurrent_streams = 256;
  std::string served_model_name;  // "" = the model file's stem
  std::string auth_token_file;    // bearer tokens, one principal each (principals.h)
  int max_streams_per_principal = 0;  // 0 = no per-principal cap
  // --cache-share-group values, "NAME=PRINCIPAL,...": principals sharing a
  // prefix-cache namespace (services/cache_scopes.h).
  std::vector<std::string> cache_share_groups;
  // Prompt + completion tokens one principal may use per minute
  // (services/token_quota.h); 0 = no quota.
  int64_t max_tokens_per_minute_per_principal = 0;
  bool metrics_per_principal = false;  // /metrics series labelled by principal
  // --accept-any-model: requests naming another model are answered by the
  // served one (llama-server's way); off, they are 404s (vLLM's).
  bool accept_any_model = false;
  std::string cluster_secret_file;    // the internal plane's secret (docs/security.md)
  std::string tls_cert, tls_key;  // PEM files; both or neither
  std::string cors_origins;       // the HTTP API's allowed browser origins ("" none, "*" any)
  int drain_timeout_ms = 30000;
};

class Gateway {
 public:
  // Loads what it needs, listens, writes the port file. Throws on errors.
  explicit Gateway(const GatewayConfig& config);
  ~Gateway();

  int port() const { return port_; }
  int metrics_port() const { return metrics_.port(); }
  int http_port() const { return http_ ? http_->port() : -1; }

  // Health -> NOT_SERVING, refuse new streams, let open ones finish for up
  // to drain_timeout_ms, then stop the server (cancelling what is left).
  void Drain();
  // Blocks until the server has stopped.
  void Wait();

 private:
  // The constructor's steps after the service exists, in order
  // (gateway_server.cc says why each exists).
  void StartGrpcServer();
  void StartHttpApi();
  void WritePorts();
  void LogServing(const GenerationService::Options& options) const;
  void StartReadinessProbe();
  void StopReadiness();

  GatewayConfig config_;
  std::string cluster_secret_;  // the internal plane's (docs/security.md)
  std::unique_ptr<Tokenizer> tokenizer_;
  GatewayMetrics metrics_;
  std::unique_ptr<GenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<openai::HttpServer> http_;
  // Polls the scheduler for the HTTP API's /health (GenerationService::PollPipeline).
  std::thread readiness_;
  std::mutex readiness_mu_;
  std::condition_variable readiness_cv_;
  bool stopping_ = false;
  int port_ = 0;
};

}  // namespace specline
