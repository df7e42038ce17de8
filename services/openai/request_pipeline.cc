#include "services/openai/request_pipeline.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "services/openai/openai_response.h"
#include "services/openai/responses_api.h"
#include "services/principals.h"

namespace specline::openai {

void RequestPipeline::SendError(HttpExchange& x, const ApiError& e) const {
  if (e.http_status >= 500) spdlog::warn("http {}: {}", e.http_status, e.message);
  const ErrorWriter write = x.error_writer() ? x.error_writer() : &ErrorBody;
  x.SendJson(static_cast<http::status>(e.http_status), write(e), e.retry_after_seconds);
}

void RequestPipeline::Refuse(HttpExchange& x, const ApiError& e, const char* grpc_status_name) const {
  service_.metrics(Api::kOpenAi).CountFailure(grpc_status_name);
  SendError(x, e);
}

void RequestPipeline::MethodNotAllowed(HttpExchange& x, const char* allowed) const {
  ApiError e;
  e.http_status = 405;
  const auto method = x.request().method_string();
  e.message = absl::StrCat("method ", std::string(method.data(), method.size()),
                           " is not allowed here; use ", allowed);
  SendError(x, e);
}

std::optional<std::string> RequestPipeline::Authenticate(HttpExchange& x) const {
  const Principals* principals = service_.principals();
  if (!principals) return std::string();
  // Bearer auth, or the same token as Anthropic's clients send it
  // (x-api-key), which llama-server and vLLM accept too.
  std::string credential = x.header(http::field::authorization);
  if (credential.empty()) {
    if (std::string key = x.header("x-api-key"); !key.empty()) credential = "Bearer " + key;
  }
  std::optional<std::string> who;
  if (!credential.empty()) who = principals->Authenticate(credential);
  if (who) return who;
  ApiError e;
  e.http_status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  e.message = credential.empty() ? "missing 'Authorization: Bearer <token>' (or 'x-api-key') header"
                                 : "invalid API key";
  Refuse(x, e, "UNAUTHENTICATED");
  return std::nullopt;
}

bool RequestPipeline::ReadJsonPost(HttpExchange& x, Endpoint endpoint, ParsedRequest* parsed,
                                   std::string* principal) const {
  if (!ReadPost(x, principal)) return false;
  const std::string& body = x.request().body();
  if (auto e = endpoint == Endpoint::kResponses ? ParseResponsesRequest(body, parsed)
                                                : ParseRequest(endpoint, body, parsed)) {
    Refuse(x, *e, "INVALID_ARGUMENT");
    return false;
  }
  return true;
}

bool RequestPipeline::ReadPost(HttpExchange& x, std::string* principal) const {
  if (x.verb() != http::verb::post) {
    MethodNotAllowed(x, "POST");
    return false;
  }
  std::optional<std::string> who = Authenticate(x);
  if (!who) return false;
  *principal = *std::move(who);
  const std::string type = x.header(http::field::content_type);
  if (type.rfind("application/json", 0) != 0) {
    ApiError e;
    e.http_status = 415;
    e.message = "Content-Type must be application/json, got '" + type + "'";
    SendError(x, e);
    return false;
  }
  return true;
}

ApiError RequestPipeline::ModelNotFound(const std::string& requested) const {
  ApiError e;
  e.http_status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = absl::StrCat("the model '", requested, "' does not exist; this server serves '",
                           service_.model_name(), "'");
  return e;
}

bool RequestPipeline::CheckModel(HttpExchange& x, const ParsedRequest& parsed) const {
  // --accept-any-model: llama-server's way, for clients that hard-code a
  // name (docs/openai_api.md says why it is off by default).
  if (parsed.model.empty() || parsed.model == service_.model_name() || service_.accept_any_model())
    return true;
  Refuse(x, ModelNotFound(parsed.model), "NOT_FOUND");
  return false;
}

bool RequestPipeline::ApplyTools(HttpExchange& x, ParsedRequest* parsed,
                                 tool_calls::Syntax* parse_with) const {
  if (auto e = ApplyToolChoice(parsed->tools, service_.served_model().tool_calls, &parsed->request,
                               parse_with)) {
    Refuse(x, *e, "INVALID_ARGUMENT");
    return false;
  }
  return true;
}

RequestRules RequestPipeline::RulesNow() const {
  RequestRules rules;
  rules.kv_capacity_tokens = service_.kv_capacity_tokens();
  rules.openai = true;
  return rules;
}

std::vector<v1::GenerateRequest> RequestPipeline::Prompts(const ParsedRequest& parsed) {
  std::vector<v1::GenerateRequest> prompts;
  if (parsed.prompts.empty()) {
    prompts.push_back(parsed.request);
    return prompts;
  }
  for (const v1::GenerateRequest& p : parsed.prompts) {
    v1::GenerateRequest one = parsed.request;
    if (p.has_token_ids()) *one.mutable_token_ids() = p.token_ids();
    else one.set_text(p.text());
    prompts.push_back(std::move(one));
  }
  return prompts;
}

}  // namespace specline::openai
