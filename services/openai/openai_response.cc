#include "services/openai/openai_response.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace specline::openai {
namespace {

using nlohmann::json;

json Envelope(const ResponseIdentity& who, bool chunk) {
  const bool chat = who.endpoint == Endpoint::kChatCompletions;
  return {{"id", who.id},
          {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", who.created},
          {"model", who.model},
          {"system_fingerprint", who.system_fingerprint.empty() ? json(nullptr)
                                                                : json(who.system_fingerprint)}};
}

json ChunkWithChoice(const ResponseIdentity& who, json choice) {
  json j = Envelope(who, true);
  j["choices"] = json::array({std::move(choice)});
  return j;
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

std::string SystemFingerprint(const std::string& model_name, int64_t vocab_size,
                              int64_t context_length) {
  // FNV-1a: stable across processes and builds (std::hash is not).
  uint64_t h = 1469598103934665603ull;
  for (char c : model_name + "/" + std::to_string(vocab_size) + "/" + std::to_string(context_length)) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string("fp_specline-") + SPECLINE_VERSION + "-" + std::string(hex, 10);
}

std::string RoleChunk(const ResponseIdentity& who, int index) {
  return Dump(ChunkWithChoice(who, {{"index", index},
                                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", nullptr}}));
}

std::string TextChunk(const ResponseIdentity& who, int index, const std::string& text,
                      const json* logprobs) {
  json choice = {{"index", index},
                 {"logprobs", logprobs ? *logprobs : json(nullptr)},
                 {"finish_reason", nullptr}};
  if (who.endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = {{"content", text}};
  } else {
    choice["text"] = text;
  }
  return Dump(ChunkWithChoice(who, std::move(choice)));
}

std::string FinishChunk(const ResponseIdentity& who, int index, v1::FinishReason finish) {
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", FinishJson(finish)}};
  if (who.endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  return Dump(ChunkWithChoice(who, std::move(choice)));
}

std::string UsageChunk(const ResponseIdentity& who, const v1::Usage& usage) {
  json j = Envelope(who, true);
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string FullResponse(const ResponseIdentity& who, const std::vector<ChoiceResult>& choices,
                         const v1::Usage& usage) {
  json j = Envelope(who, false);
  j["choices"] = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    json choice = {{"index", i},
                   {"logprobs", choices[i].logprobs ? *choices[i].logprobs : json(nullptr)},
                   {"finish_reason", FinishJson(choices[i].finish)}};
    if (who.endpoint == Endpoint::kChatCompletions) {
      choice["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    } else {
      choice["text"] = choices[i].text;
    }
    j["choices"].push_back(std::move(choice));
  }
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

ApiError ErrorFromStatus(Endpoint endpoint, int grpc_code, const std::string& message,
                         const std::string& details) {
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
  if (grpc_code == 3 && details == "context_length_exceeded") e.code = details;
  return e;
}

}  // namespace specline::openai
