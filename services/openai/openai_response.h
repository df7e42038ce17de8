// The OpenAI API's response bodies, built from the gateway's
// GenerateResponse messages: streamed chunks (SSE `data:` payloads), the
// whole non-streamed response, the usage chunk, and error bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

// What every chunk and response of one request repeats.
struct ResponseIdentity {
  Endpoint endpoint;
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  std::string system_fingerprint;  // "" = left out
};

// The system_fingerprint every response and chunk carries: the server's
// version and a hash of what shapes its output for the same request (the
// served model's name, vocabulary and context), so a client sees when
// either changed.
std::string SystemFingerprint(const std::string& model_name, int64_t vocab_size,
                              int64_t context_length);

// One choice of a non-streamed response.
struct ChoiceResult {
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  std::optional<nlohmann::json> logprobs;  // the choice's logprobs object, when asked for
};

// "stop", "length", "abort"; "" while not finished.
const char* FinishReasonName(v1::FinishReason reason);

// The streamed chunks, framed as OpenAI frames them: chat opens each choice
// with a role-only chunk (delta {"role": "assistant", "content": ""}); text
// rides in chunks whose finish_reason is null; each choice ends with an
// empty-delta chunk that carries its finish_reason.
std::string RoleChunk(const ResponseIdentity& who, int index);
// `logprobs`: the chunk's logprobs object (logprobs_json.h), or null.
std::string TextChunk(const ResponseIdentity& who, int index, const std::string& text,
                      const nlohmann::json* logprobs = nullptr);
std::string FinishChunk(const ResponseIdentity& who, int index, v1::FinishReason finish);
// The chunk with `choices: []` and the usage totals (stream_options.include_usage).
std::string UsageChunk(const ResponseIdentity& who, const v1::Usage& usage);
// The whole response of a non-streamed request.
// `choices[i]` is choice i; `echo` is prepended to each (completions' echo).
std::string FullResponse(const ResponseIdentity& who, const std::vector<ChoiceResult>& choices,
                         const v1::Usage& usage);
// {"error": {...}}.
std::string ErrorBody(const ApiError& error);
// An ApiError for a gRPC status of the shared pipeline (validation,
// admission, the scheduler), with the HTTP status OpenAI clients expect.
// `details` is the status's error details: the request builder's error code
// (context_length_exceeded) when it set one.
ApiError ErrorFromStatus(Endpoint endpoint, int grpc_code, const std::string& message,
                         const std::string& details = "");

}  // namespace specline::openai
