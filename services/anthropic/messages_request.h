// Anthropic's Messages API request (POST /v1/messages) turned into the
// OpenAI chat body the shared pipeline parses (services/openai/
// request_pipeline.h), so both APIs share one validation, chat template,
// tool handling and sampling path: Anthropic's content blocks become
// OpenAI's messages (text; tool_use as an assistant's tool_calls;
// tool_result as "tool" messages), `system` (a string or text blocks, and
// system turns inside `messages`, which newer Claude Code sends) the system
// message, `tools` with `input_schema` function tools, `tool_choice`
// auto / any / tool / none, `stop_sequences` stop strings, and a final
// assistant turn a prefill the model continues (vLLM's
// continue_final_message). Everything else is refused with a 400 naming
// the field, in Anthropic's error shape.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"

namespace specline::anthropic {

struct MessagesRequest {
  nlohmann::json chat;  // the OpenAI chat body
  std::string model;
  bool stream = false;
  bool prefill = false;  // the last turn is the assistant's, continued
};

// nullopt on success. count_only: POST /v1/messages/count_tokens's body,
// where max_tokens is not asked for.
std::optional<openai::ApiError> ParseMessagesRequest(std::string_view body, MessagesRequest* out,
                                                     bool count_only = false);

}  // namespace specline::anthropic
