// The OpenAI API's response bodies, built from the gateway's
// GenerateResponse messages: streamed chunks (SSE `data:` payloads), the
// whole non-streamed response, the usage chunk, and error bodies.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "services/openai/openai_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

// What every chunk and response of one request repeats.
struct ResponseIdentity {
  Endpoint endpoint;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// "stop", "length", "abort"; "" while not finished.
const char* FinishReasonName(v1::FinishReason reason);

// One streamed chunk carrying `message`'s text (and its finish reason when
// it is the last). For chat, `first` adds the assistant role to the delta.
// `logprobs`: the chunk's logprobs object (logprobs_json.h), or null.
std::string StreamChunk(const ResponseIdentity& who, const v1::GenerateResponse& message,
                        bool first, const nlohmann::json* logprobs = nullptr);
// The chunk with `choices: []` and the usage totals (stream_options.include_usage).
std::string UsageChunk(const ResponseIdentity& who, const v1::Usage& usage);
// The whole response of a non-streamed request.
std::string FullResponse(const ResponseIdentity& who, const std::string& text,
                         v1::FinishReason finish, const v1::Usage& usage,
                         const nlohmann::json* logprobs = nullptr);
// {"error": {...}}.
std::string ErrorBody(const ApiError& error);
// An ApiError for a gRPC status of the shared pipeline (validation,
// admission, the scheduler), with the HTTP status OpenAI clients expect.
ApiError ErrorFromStatus(Endpoint endpoint, int grpc_code, const std::string& message);

}  // namespace specline::openai
