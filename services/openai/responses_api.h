// OpenAI's Responses API (POST /v1/responses), the one Codex and newer SDKs
// speak: text in and out, streamed or not. The request becomes a chat
// GenerateRequest (`instructions` a system message, `input` the
// conversation), so it runs the chat API's template, validation and
// admission; the answer is a `response` object, or the streamed events
// response.created, response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done, response.completed
// (response.failed on an error after the stream began).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/openai/openai_response.h"

namespace specline::openai {

// Parses a /v1/responses body. Fields that do not change the output
// (store, metadata, user, service_tier, truncation "disabled", ...) are
// accepted; tools, reasoning, previous_response_id and non-text inputs are
// refused by name.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, ParsedRequest* out);

// The `response` object's text and end, and the events that carry them.
class ResponsesRender {
 public:
  // `request` is the parsed body (its sampling values are echoed back).
  ResponsesRender(ResponseIdentity who, const ParsedRequest& request);

  // The whole non-streamed answer.
  std::string Whole(const std::string& text, v1::FinishReason finish, const v1::Usage& usage) const;

  // Streamed: the opening events (created, item added, part added).
  std::string Opening();
  std::string Delta(const std::string& text);
  // The closing events, after the last delta.
  std::string Closing(v1::FinishReason finish, const v1::Usage& usage);
  // An error after the stream began.
  std::string Failed(const ApiError& error);

 private:
  nlohmann::json Object(const std::string& status) const;
  nlohmann::json Message(const std::string& status, const std::string& text) const;
  std::string Event(const std::string& type, nlohmann::json payload);

  ResponseIdentity who_;
  std::string item_id_;
  nlohmann::json params_;  // the request values echoed in every response object
  std::string text_;       // streamed so far
  int sequence_ = 0;
};

}  // namespace specline::openai
