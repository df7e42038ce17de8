#include "services/anthropic/messages_endpoints.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/cluster_secret.h"
#include "services/anthropic/messages_generation.h"
#include "services/openai/openai_response.h"

namespace specline::anthropic {

bool MessagesEndpoints::Read(openai::HttpExchange& x, bool count_only, MessagesRequest* request,
                             openai::ParsedRequest* parsed, std::string* principal,
                             tool_calls::Syntax* parse_with) const {
  if (!pipeline_.ReadPost(x, principal)) return false;
  if (auto e = ParseMessagesRequest(x.request().body(), request, count_only)) {
    pipeline_.Refuse(x, *e, "INVALID_ARGUMENT");
    return false;
  }
  // The translated body is the OpenAI API's own: what it refuses, it names
  // in its fields, which are the same as Anthropic's but for these.
  if (auto e = openai::ParseRequest(openai::Endpoint::kChatCompletions, request->chat.dump(), parsed)) {
    if (e->param == "stop") e->message = "stop_sequences" + e->message.substr(4);
    pipeline_.Refuse(x, *e, "INVALID_ARGUMENT");
    return false;
  }
  return pipeline_.CheckModel(x, *parsed) && pipeline_.ApplyTools(x, parsed, parse_with);
}

void MessagesEndpoints::Messages(openai::HttpExchange& x) const {
  MessagesRequest request;
  openai::ParsedRequest parsed;
  std::string principal;
  tool_calls::Syntax parse_with = tool_calls::Syntax::kNone;
  if (!Read(x, /*count_only=*/false, &request, &parsed, &principal, &parse_with)) return;
  GenerationService& service = pipeline_.service();
  const ServedModel& model = service.served_model();
  auto g = std::make_shared<MessagesGeneration>(x.shared_from_this(), "msg_" + RandomHex(12),
                                                service.model_name(), request.stream);
  parsed.request.set_request_id(g->id());
  if (parse_with != tool_calls::Syntax::kNone) {
    g->tools = std::make_unique<openai::ToolCallResponder>(parse_with, model.tool_calls, model.tokenizer,
                                                           parsed.tools.parallel_tool_calls);
  }
  if (!parsed.user.empty()) spdlog::info("req={} user={}", g->id(), parsed.user);
  int64_t retry_after = 0;
  // Everything that can refuse the request has answered by the time
  // StartChoices returns, so its error is a plain HTTP error.
  const grpc::Status started =
      service.StartChoices(Api::kOpenAi, principal, {parsed.request}, g, &g->call, &retry_after);
  if (!started.ok()) {
    openai::ApiError e = openai::ErrorFromStatus(openai::Endpoint::kChatCompletions, started.error_code(),
                                                 started.error_message(), started.error_details());
    e.retry_after_seconds = retry_after;
    return pipeline_.SendError(x, e);
  }
  g->Begin();
}

// The prompt's tokens as the generation would count them (the template,
// the tools, the tokenizer), {"input_tokens": N}; nothing is admitted.
void MessagesEndpoints::CountTokens(openai::HttpExchange& x) const {
  MessagesRequest request;
  openai::ParsedRequest parsed;
  std::string principal;
  tool_calls::Syntax parse_with = tool_calls::Syntax::kNone;
  if (!Read(x, /*count_only=*/true, &request, &parsed, &principal, &parse_with)) return;
  int tokens = 0;
  if (grpc::Status s = pipeline_.service().PromptTokens(parsed.request, &tokens); !s.ok()) {
    return pipeline_.SendError(x, openai::ErrorFromStatus(openai::Endpoint::kChatCompletions, s.error_code(),
                                                          s.error_message(), s.error_details()));
  }
  x.SendJson(openai::http::status::ok, nlohmann::json{{"input_tokens", tokens}}.dump());
}

}  // namespace specline::anthropic
