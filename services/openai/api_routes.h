// Which handler answers a request on the API port: a table of paths, each
// to its endpoint family (OpenAI's API, what routers read; Anthropic's and
// llama-server's APIs join here), all sharing one RequestPipeline. The
// transport (http_connection.h) calls Handle once per request.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>

#include "services/anthropic/messages_endpoints.h"
#include "services/llama_server/llama_server_endpoints.h"
#include "services/openai/http_exchange.h"
#include "services/openai/openai_endpoints.h"
#include "services/openai/request_pipeline.h"
#include "services/openai/router_endpoints.h"

namespace specline::openai {

class ApiRoutes {
 public:
  ApiRoutes(GenerationService& service, std::string scheduler_address);

  void Handle(HttpExchange& x) const;

 private:
  using Handler = std::function<void(HttpExchange&)>;

  RequestPipeline pipeline_;
  OpenAiEndpoints openai_;
  anthropic::MessagesEndpoints anthropic_;
  llama_server::LlamaServerEndpoints llama_;
  RouterEndpoints router_;
  std::unordered_map<std::string, Handler> exact_;  // path -> handler
};

}  // namespace specline::openai
