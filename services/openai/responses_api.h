// OpenAI's Responses API (POST /v1/responses), the one Codex, agent SDKs
// and newer clients speak: text and function tools, streamed or not. The
// request becomes a chat GenerateRequest (`instructions` a system message,
// `input` the conversation, its function_call / function_call_output items
// tool calls and tool messages, `tools` chat's: responses_tools.h), so it
// runs the chat API's template, tools, validation and admission; the answer
// is a `response` object, or the streamed events response.created, then per
// item response.output_item.added, its content (response.content_part.added,
// response.output_text.delta..., .output_text.done, .content_part.done; or a
// call's response.function_call_arguments.delta..., .done), and
// response.output_item.done, then response.completed (response.failed on an
// error after the stream began). Nothing is stored.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/openai/openai_response.h"
#include "services/tool_calls/tool_call_parser.h"

namespace specline::openai {

// Parses a /v1/responses body. Fields that do not change the output
// (store, metadata, user, service_tier, truncation "disabled", ...) are
// accepted; hosted tools, reasoning, previous_response_id (nothing is
// stored) and non-text inputs are refused by name.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, ParsedRequest* out);

// The `response` object's output items and the events that carry them: a
// message item for the text, a function_call item per tool call.
class ResponsesRender {
 public:
  // `request` is the parsed body (its sampling values and tools are echoed
  // back).
  ResponsesRender(ResponseIdentity who, const ParsedRequest& request);

  // The whole non-streamed answer: the text's message item (absent when the
  // answer is only calls), then a function_call item per call.
  std::string Whole(const tool_calls::ParsedText& answer, v1::FinishReason finish,
                    const v1::Usage& usage) const;
  std::string Whole(const std::string& text, v1::FinishReason finish, const v1::Usage& usage) const;

  // Streamed: response.created.
  std::string Opening();
  // Text; the message item opens with its first piece.
  std::string Delta(const std::string& text);
  // What one message of a request with tools resolved into
  // (ToolCallResponder::Next): its text, and each call's events.
  std::string Parsed(const tool_calls::ParsedText& parsed);
  // The closing events, after the last delta.
  std::string Closing(v1::FinishReason finish, const v1::Usage& usage);
  // An error after the stream began.
  std::string Failed(const ApiError& error);

 private:
  nlohmann::json Object(const std::string& status) const;
  nlohmann::json Message(const std::string& id, const std::string& status, const std::string& text) const;
  std::string ItemId(const char* prefix, size_t output_index) const;
  std::string Event(const std::string& type, nlohmann::json payload);
  std::string OpenMessage();
  std::string CloseMessage();
  std::string CallEvent(const tool_calls::CallDelta& delta);

  ResponseIdentity who_;
  std::string id_suffix_;  // the response id's, for the items' ids
  nlohmann::json params_;  // the request values echoed in every response object
  std::vector<nlohmann::json> output_;  // streamed: the items so far
  std::optional<size_t> message_;       // the open message item's index
  std::string text_;                    // its text so far
  std::map<int, size_t> calls_;         // a call's index -> its item's
  int sequence_ = 0;
};

}  // namespace specline::openai
