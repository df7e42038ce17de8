// OpenAI's API on the HTTP port: /v1/models, /v1/completions,
// /v1/chat/completions, /v1/responses, vLLM's render endpoints beside them
// (the same bodies in, the prompts' token ids out), and llama-server's
// /apply-template (a chat body in, the prompt out). Each request runs the
// shared RequestPipeline, then a generation (openai_generation.h).
#pragma once

#include <cstdint>

#include "services/openai/http_exchange.h"
#include "services/openai/openai_request.h"
#include "services/openai/request_pipeline.h"

namespace specline::openai {

class OpenAiEndpoints {
 public:
  explicit OpenAiEndpoints(const RequestPipeline& pipeline);

  // GET /v1/models and /v1/models/{id}.
  void ListModels(HttpExchange& x) const;
  void GetModel(HttpExchange& x, const std::string& id) const;
  // POST /v1/completions, /v1/chat/completions, /v1/responses.
  void Generate(HttpExchange& x, Endpoint endpoint) const;
  // POST /v1/{completions,chat/completions,responses}/render.
  void Render(HttpExchange& x, Endpoint endpoint) const;
  // POST /apply-template (llama-server's).
  void ApplyTemplate(HttpExchange& x) const;
  // POST /v1/chat/completions/input_tokens, /v1/responses/input_tokens
  // (llama-server's, with and without /v1).
  void InputTokens(HttpExchange& x, Endpoint endpoint) const;

 private:
  nlohmann::json ModelJson() const;
  // The text of a completions prompt, for echo: token ids are decoded.
  std::string PromptText(const v1::GenerateRequest& r) const;

  const RequestPipeline& pipeline_;
  GenerationService& service_;
  const int64_t created_;  // the server's start, as the models' "created"
};

}  // namespace specline::openai
