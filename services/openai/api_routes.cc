#include "services/openai/api_routes.h"

#include "absl/strings/str_cat.h"

namespace specline::openai {

ApiRoutes::ApiRoutes(GenerationService& service, std::string scheduler_address)
    : pipeline_(service), openai_(pipeline_), llama_(pipeline_), router_(pipeline_, std::move(scheduler_address)) {
  const auto generate = [this](Endpoint e) { return [this, e](HttpExchange& x) { openai_.Generate(x, e); }; };
  const auto render = [this](Endpoint e) { return [this, e](HttpExchange& x) { openai_.Render(x, e); }; };
  const auto input_tokens = [this](Endpoint e) {
    return [this, e](HttpExchange& x) { openai_.InputTokens(x, e); };
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
      // llama-server's.
      {"/apply-template", [this](HttpExchange& x) { openai_.ApplyTemplate(x); }},
      {"/tokenize", [this](HttpExchange& x) { llama_.Tokenize(x); }},
      {"/detokenize", [this](HttpExchange& x) { llama_.Detokenize(x); }},
      {"/props", [this](HttpExchange& x) { llama_.Props(x); }},
      {"/slots", [this](HttpExchange& x) { llama_.Slots(x); }},
      {"/completion", [this](HttpExchange& x) { llama_.Completion(x); }},
      {"/completions", [this](HttpExchange& x) { llama_.Completion(x); }},
      {"/infill", [this](HttpExchange& x) { llama_.Infill(x); }},
      {"/v1/chat/completions/input_tokens", input_tokens(Endpoint::kChatCompletions)},
      {"/chat/completions/input_tokens", input_tokens(Endpoint::kChatCompletions)},
      {"/v1/responses/input_tokens", input_tokens(Endpoint::kResponses)},
      {"/responses/input_tokens", input_tokens(Endpoint::kResponses)},
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
