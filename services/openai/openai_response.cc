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
          {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()}};
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
                        bool first) {
  json j = Envelope(who, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishJson(message.finish_reason())}};
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
                         v1::FinishReason finish, const v1::Usage& usage) {
  json j = Envelope(who, false);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishJson(finish)}};
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
  ApiError e;
  e.message = message;
  switch (grpc_code) {
    case 3:  // INVALID_ARGUMENT
    case 11:  // OUT_OF_RANGE
      e.http_status = 400;
      e.message = ToOpenAiMessage(endpoint, message, &e.param);
      break;
    case 9:  // FAILED_PRECONDITION: a policy this deployment has no head for
      e.http_status = 400;
      e.param = "policy";
      break;
    case 16:  // UNAUTHENTICATED
      e.http_status = 401;
      e.type = "authentication_error";
      break;
    case 7:  // PERMISSION_DENIED
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case 5:  // NOT_FOUND
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case 6:  // ALREADY_EXISTS (a duplicate request id)
      e.http_status = 409;
      break;
    case 8:  // RESOURCE_EXHAUSTED: stream caps or the scheduler's queue
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case 14:  // UNAVAILABLE: draining, or a stage is down
      e.http_status = 503;
      e.type = "service_unavailable";
      break;
    case 4:  // DEADLINE_EXCEEDED
      e.http_status = 504;
      e.type = "timeout_error";
      break;
    case 1:  // CANCELLED
      e.http_status = 499;
      e.type = "cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
  }
  return e;
}

}  // namespace specline::openai
