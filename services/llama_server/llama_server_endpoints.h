// llama-server's own endpoints on the API port, so that editor plugins,
// scripts and UIs written for llama-server work against specline
// unchanged: /tokenize, /detokenize, /props, /slots, /completion (and its
// alias /completions), /infill. Each runs the shared RequestPipeline (auth,
// the POST, its errors, in llama-server's error shape) and generates
// through the same GenerationService path as the OpenAI API.
// docs/llama_server_api.md lists every field and every difference.
#pragma once

#include "services/openai/http_exchange.h"
#include "services/openai/request_pipeline.h"

namespace specline::llama_server {

class LlamaServerEndpoints {
 public:
  explicit LlamaServerEndpoints(const openai::RequestPipeline& pipeline);

  void Tokenize(openai::HttpExchange& x) const;
  void Detokenize(openai::HttpExchange& x) const;
  void Props(openai::HttpExchange& x) const;
  void Slots(openai::HttpExchange& x) const;
  void Completion(openai::HttpExchange& x) const;
  void Infill(openai::HttpExchange& x) const;

 private:
  // The POST's JSON body (authenticated) into `body`; false after answering.
  bool ReadBody(openai::HttpExchange& x, nlohmann::json* body, std::string* principal) const;
  // The tokenizer, or false after a 400 (a model served without one).
  bool NeedTokenizer(openai::HttpExchange& x) const;
  // An error in llama-server's shape (server_errors.h, set on the exchange
  // by the route table, so the shared pipeline's 401 is in it too); Refuse
  // counts it as a refused request first.
  void Send(openai::HttpExchange& x, const openai::ApiError& e) const;
  void Refuse(openai::HttpExchange& x, const openai::ApiError& e) const;
  // Whether the request's method is `verb`; a 405 naming it otherwise.
  bool Allow(openai::HttpExchange& x, openai::http::verb verb) const;
  // A /completion or /infill body whose prompts are in `prompts`.
  void Generate(openai::HttpExchange& x, const nlohmann::json& body, const std::string& principal,
                std::vector<std::vector<int32_t>> prompts, bool several) const;
  int32_t Context() const;

  const openai::RequestPipeline& pipeline_;
  GenerationService& service_;
};

}  // namespace specline::llama_server
