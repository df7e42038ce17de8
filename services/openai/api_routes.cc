#include "services/openai/api_routes.h"

#include "absl/strings/str_cat.h"
#include "services/anthropic/anthropic_errors.h"
#include "services/llama_server/server_errors.h"

namespace specline::openai {

ApiRoutes::ApiRoutes(GenerationService& service, std::string scheduler_address)
    : pipeline_(service),
      openai_(pipeline_),
      anthropic_(pipeline_),
      llama_(pipeline_),
      router_(pipeline_, std::move(scheduler_address)) {
  const auto generate = [this](Endpoint e) { return [this, e](HttpExchange& x) { openai_.Generate(x, e); }; };
  const auto render = [this](Endpoint e) { return [this, e](HttpExchange& x) { openai_.Render(x, e); }; };
  const auto input_tokens = [this](Endpoint e) {
    return [this, e](HttpExchange& x) { openai_.InputTokens(x, e); };
  };
  // Each API family answers its errors in its own shape, set on the
  // exchange before its handler runs (RequestPipeline::SendError reads it),
  // so the shared steps (auth, the body, the model) answer in it too.
  const auto anthropic = [this](void (anthropic::MessagesEndpoints::*handler)(HttpExchange&) const) {
    return [this, handler](HttpExchange& x) {
      x.set_error_writer(&anthropic::ErrorBody);
      (anthropic_.*handler)(x);
    };
  };
  const auto llama = [this](void (llama_server::LlamaServerEndpoints::*handler)(HttpExchange&) const) {
    return [this, handler](HttpExchange& x) {
      x.set_error_writer(&llama_server::NativeErrorBody);
      (llama_.*handler)(x);
    };
  };
  exact_ = {
      // OpenAI's API (and vLLM's render endpoints beside it).
      {"/v1/models", [this](HttpExchange& x) { openai_.ListModels(x); }},
      {"/v1/completions", generate(Endpoint::kCompletions)},
      {"/v1/chat/completions", generate(Endpoint::kChatCompletions)},
      {"/v1/responses", generate(Endpoint::kResponses)},
      {"/v1/completions/render", render(Endpoint::kCompletions)},
      {"/v1/chat/completions/render", render(Endpoint::kChatCompletions)},
      {"/v1/responses/render", render(Endpoint::kResponses)},
      // Anthropic's Messages API (services/anthropic/).
      {"/v1/messages", anthropic(&anthropic::MessagesEndpoints::Messages)},
      {"/v1/messages/count_tokens", anthropic(&anthropic::MessagesEndpoints::CountTokens)},
      // llama-server's.
      {"/apply-template", [this](HttpExchange& x) { openai_.ApplyTemplate(x); }},
      {"/v1/chat/completions/input_tokens", input_tokens(Endpoint::kChatCompletions)},
      {"/chat/completions/input_tokens", input_tokens(Endpoint::kChatCompletions)},
      {"/v1/responses/input_tokens", input_tokens(Endpoint::kResponses)},
      {"/responses/input_tokens", input_tokens(Endpoint::kResponses)},
      {"/tokenize", llama(&llama_server::LlamaServerEndpoints::Tokenize)},
      {"/detokenize", llama(&llama_server::LlamaServerEndpoints::Detokenize)},
      {"/props", llama(&llama_server::LlamaServerEndpoints::Props)},
      {"/slots", llama(&llama_server::LlamaServerEndpoints::Slots)},
      {"/completion", llama(&llama_server::LlamaServerEndpoints::Completion)},
      {"/completions", llama(&llama_server::LlamaServerEndpoints::Completion)},
      {"/infill", llama(&llama_server::LlamaServerEndpoints::Infill)},
      // What routers and orchestrators read (docs/routers.md).
      {"/health", [this](HttpExchange& x) { router_.Health(x); }},
      {"/get_load", [this](HttpExchange& x) { router_.GetLoad(x); }},
      {"/get_server_info", [this](HttpExchange& x) { router_.ServerInfo(x); }},
      {"/get_model_info", [this](HttpExchange& x) { router_.ServerInfo(x); }},
      {"/kv_event_sources", [this](HttpExchange& x) { router_.KvEventSources(x); }},
      {"/metrics", [this](HttpExchange& x) { router_.VllmMetrics(x); }},
  };
}

void ApiRoutes::Handle(HttpExchange& x) const {
  const std::string path = x.path();
  if (auto it = exact_.find(path); it != exact_.end()) return it->second(x);
  constexpr std::string_view kModel = "/v1/models/";
  if (path.starts_with(kModel)) return openai_.GetModel(x, path.substr(kModel.size()));
  ApiError e;
  e.http_status = 404;
  e.type = "not_found_error";
  const auto method = x.request().method_string();
  e.message = absl::StrCat("no route for ", std::string(method.data(), method.size()), " ", path);
  pipeline_.SendError(x, e);
}

}  // namespace specline::openai
