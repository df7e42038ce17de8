// The gateway's OpenAI-compatible HTTP/SSE API on its own port:
//   POST /v1/completions, POST /v1/chat/completions, POST /v1/responses
//   (streamed or not), GET /v1/models, GET /v1/models/{id}, GET /health,
//   and CORS preflights (OPTIONS) for the origins --cors-origins allows;
//   for the routers in front of replicas (docs/routers.md) vLLM's render
//   endpoints (POST /v1/chat/completions/render, /v1/completions/render,
//   /v1/responses/render), SGLang's probes (GET /get_load,
//   /get_server_info, /get_model_info) and vLLM's metrics (GET /metrics,
//   vllm_metrics.h) and the KV events' sources (GET /kv_event_sources).
// The server only listens and runs the I/O threads: the transport is
// http_connection.h, which paths go where api_routes.h, and each endpoint
// family its own files (openai_endpoints.h, router_endpoints.h) over one
// request pipeline (request_pipeline.h) (docs/openai_api.md, "Layout").
// Boost.Beast over Asio (docs/dependencies.md): a few I/O threads serve
// every connection, and a streaming request waits for tokens in gRPC's
// callback API (async_generation.h), so an open stream holds no thread.
// Requests go through GenerationService like the gRPC API's: the same
// validation, admission caps, auth principals, drain and metrics.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "services/generation_service.h"

namespace specline::openai {

class HttpServer {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 0;  // 0 = pick
    int io_threads = 2;
    size_t max_body_bytes = 1 << 20;  // larger bodies get 413
    std::string tls_cert, tls_key;    // PEM files; both or neither
    // Browser origins allowed to call the API (cors.h): "" none, "*" any,
    // or a comma-separated list.
    std::string cors_origins;
    // The scheduler's host:port (--scheduler): its KV events' endpoints
    // are resolved against it for GET /kv_event_sources.
    std::string scheduler_address;
  };

  // Listens at once (ListenError when the port is taken).
  HttpServer(GenerationService& service, Options options);
  ~HttpServer();

  int port() const { return port_; }
  // Stops accepting connections and waits up to `grace_ms` for responses
  // still being written, then closes everything and joins the threads.
  void Stop(int grace_ms = 2000);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// GET http://127.0.0.1:port/health; true on 200 (the launcher waits for it).
bool HealthOk(int port);

}  // namespace specline::openai
