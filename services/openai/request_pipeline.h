// The steps an API request goes through on its way to a generation (or a
// render), shared by every endpoint family (api_routes.h): bearer
// authentication (or x-api-key), the JSON body parsed as its endpoint's, the model name,
// the tools against the served model's template, the prompts of a list.
// Each step answers its own error on the exchange (OpenAI's shape) and
// counts it, then returns false / nullopt: the caller just returns.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "services/generation_service.h"
#include "services/openai/http_exchange.h"
#include "services/openai/openai_request.h"
#include "services/request_builder.h"

namespace specline::openai {

class RequestPipeline {
 public:
  explicit RequestPipeline(GenerationService& service) : service_(service) {}
  GenerationService& service() const { return service_; }

  // Bearer auth as the gRPC API does it: the principal ("" when the server
  // has no --auth-token-file), or nullopt after answering 401.
  std::optional<std::string> Authenticate(HttpExchange& x) const;
  // A POST with a JSON body, authenticated (the principal in `principal`).
  bool ReadPost(HttpExchange& x, std::string* principal) const;
  // ReadPost, and the body parsed as `endpoint`'s.
  bool ReadJsonPost(HttpExchange& x, Endpoint endpoint, ParsedRequest* parsed,
                    std::string* principal) const;
  // The request's model against the served one (404 otherwise, unless
  // --accept-any-model).
  bool CheckModel(HttpExchange& x, const ParsedRequest& parsed) const;
  // The 404 of a model name this server does not serve.
  ApiError ModelNotFound(const std::string& requested) const;
  // The request's tools against the served model (tool_request.h).
  bool ApplyTools(HttpExchange& x, ParsedRequest* parsed, tool_calls::Syntax* parse_with) const;
  // A generation request's body through all three: read, model, tools.
  bool ReadGenerationRequest(HttpExchange& x, Endpoint endpoint, ParsedRequest* parsed,
                             std::string* principal, tool_calls::Syntax* parse_with) const {
    return ReadJsonPost(x, endpoint, parsed, principal) && CheckModel(x, *parsed) &&
           ApplyTools(x, parsed, parse_with);
  }

  // 405 naming the method(s) allowed.
  void MethodNotAllowed(HttpExchange& x, const char* allowed) const;
  void SendError(HttpExchange& x, const ApiError& e) const;
  // SendError, counted as a refusal of `grpc_status_name` ("INVALID_ARGUMENT").
  void Refuse(HttpExchange& x, const ApiError& e, const char* grpc_status_name) const;

  // What the OpenAI API's requests are held to now (the KV capacity).
  RequestRules RulesNow() const;

  // The prompts of a parsed request, one GenerateRequest each: a list of
  // completions prompts, or the request's own prompt.
  static std::vector<v1::GenerateRequest> Prompts(const ParsedRequest& parsed);

 private:
  GenerationService& service_;
};

}  // namespace specline::openai
