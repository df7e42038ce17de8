// The OpenAI API's request bodies (POST /v1/completions and
// /v1/chat/completions) turned into the public GenerateRequest, so the HTTP
// API runs exactly the gRPC API's validation and decoding. Every field is
// either honoured, or refused with a 400 naming it, except the few OpenAI
// itself accepts without changing the output (store, metadata,
// service_tier, modalities ["text"], reasoning_effort): accepted, ignored.
// Accepted beyond OpenAI's own fields: vLLM's top-level sampling extensions
// (top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids) and
// specline's `policy` ("ar", "ppsd", "spd", "pipo", "ptp") and `pipo_tau`,
// and vLLM's `cache_salt` (the prefix-cache salt; docs/security.md); and
// the vLLM / SGLang fields their routers add to every body
// (skip_special_tokens, include_stop_str_in_output / no_stop_trim,
// continue_final_message, min_tokens 0, return_hidden_states false, the
// reasoning fields without effect: docs/routers.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "services/openai/tool_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

enum class Endpoint { kCompletions, kChatCompletions, kResponses };

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
  int64_t retry_after_seconds = 0;  // > 0: sent as the Retry-After header (429s)
};

// A 400 naming the request field `param`: "param: why".
ApiError BadField(const std::string& param, const std::string& why);

struct ParsedRequest {
  v1::GenerateRequest request;
  std::string model;  // as sent ("" when absent)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;            // logged, not interpreted
  // Completions: a list of several prompts, each holding only its prompt
  // (text or token_ids); `request` then has none. Choice i of the response
  // is prompt i / n's (i % n)-th sample.
  std::vector<v1::GenerateRequest> prompts;
  bool echo = false;             // completions: the prompt's text comes first
  bool max_tokens_zero = false;  // completions' max_tokens: 0 (nothing generated)
  int n = 1;
  ToolRequest tools;           // chat: tools, tool_choice (tool_request.h)
};

// Parses and checks a request body. On success `error` is empty.
std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     ParsedRequest* out);

// Rewrites an INVALID_ARGUMENT message of the gRPC validation
// ("sampling.top_p: must be ...") in the OpenAI API's field names
// ("top_p: must be ..."); `param` gets the field.
std::string ToOpenAiMessage(Endpoint endpoint, const std::string& grpc_message,
                            std::string* param);

}  // namespace specline::openai
