#include "services/openai/openai_response.h"

#include <nlohmann/json.hpp>

namespace specline::openai {
namespace {

using nlohmann::json;

json Envelope(const ResponseIdentity& who, bool chunk) {
  const bool chat = who.endpoint == Endpoint::kChatCompletions;
  return {{"id", who.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", who.created},
          {"model", who.model}};
}

json UsageJson(const v1::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens()},
          {"completion_tokens", usage.completion_tokens()},
          {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens()}}}};
}

json FinishJson(v1::FinishReason reason) {
  const char* name = FinishReasonName(reason);
  return *name ? json(name) : json(nullptr);
}

// Text that is not valid UTF-8 cannot be JSON; the detokenizer never
// splits a character, so this only replaces bytes the model itself made.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_ABORT: return "abort";
    default: return "";
  }
}

std::string StreamChunk(const ResponseIdentity& who, const v1::GenerateResponse& message,
                        bool first, const json* logprobs) {
  json j = Envelope(who, true);
  json choice = {{"index", 0},
                 {"logprobs", logprobs ? *logprobs : json(nullptr)},
                 {"finish_reason", FinishJson(message.finish_reason())}};
  if (who.endpoint == Endpoint::kChatCompletions) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!message.text().empty() || first) delta["content"] = message.text();
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = message.text();
  }
  j["choices"] = json::array({std::move(choice)});
  return Dump(j);
}

std::string UsageChunk(const ResponseIdentity& who, const v1::Usage& usage) {
  json j = Envelope(who, true);
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string FullResponse(const ResponseIdentity& who, const std::string& text,
                         v1::FinishReason finish, const v1::Usage& usage, const json* logprobs) {
  json j = Envelope(who, false);
  json choice = {{"index", 0},
                 {"logprobs", logprobs ? *logprobs : json(nullptr)},
                 {"finish_reason", FinishJson(finish)}};
  if (who.endpoint == Endpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string ErrorBody(const ApiError& error) {
  json e = {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", error.code.empty() ? json(nullptr) : json(error.code)}};
  return Dump(json{{"error", std::move(e)}});
}

ApiError ErrorFromStatus(Endpoint endpoint, int grpc_code, const std::string& message) {
  // gRPC code -> the HTTP status and error type OpenAI clients expect.
  struct Mapping {
    int grpc_code, http_status;
    const char* type;
  };
  static constexpr Mapping kMappings[] = {
      {1, 499, "cancelled"},                // CANCELLED
      {3, 400, "invalid_request_error"},    // INVALID_ARGUMENT
      {4, 504, "timeout_error"},            // DEADLINE_EXCEEDED
      {5, 404, "not_found_error"},          // NOT_FOUND
      {6, 409, "invalid_request_error"},    // ALREADY_EXISTS: a duplicate request id
      {7, 403, "permission_error"},         // PERMISSION_DENIED
      {8, 429, "rate_limit_error"},         // RESOURCE_EXHAUSTED: stream caps, a full queue
      {9, 400, "invalid_request_error"},    // FAILED_PRECONDITION: a policy without its head
      {11, 400, "invalid_request_error"},   // OUT_OF_RANGE
      {14, 503, "service_unavailable"},     // UNAVAILABLE: draining, a stage down
      {16, 401, "authentication_error"},    // UNAUTHENTICATED
  };
  ApiError e;
  e.message = message;
  e.http_status = 500;
  e.type = "server_error";
  for (const Mapping& m : kMappings) {
    if (m.grpc_code != grpc_code) continue;
    e.http_status = m.http_status;
    e.type = m.type;
  }
  if (grpc_code == 3 || grpc_code == 11) e.message = ToOpenAiMessage(endpoint, message, &e.param);
  if (grpc_code == 9) e.param = "policy";
  return e;
}

}  // namespace specline::openai
