// Function tools on the Responses API (POST /v1/responses), mapped onto the
// chat request the gateway already serves: the flat tools
// ({"type": "function", "name", "description", "parameters", "strict"}) to
// chat's {"type": "function", "function": {...}}, tool_choice's
// {"type": "function", "name"} to chat's named function, and the
// conversation's function_call items to an assistant's tool_calls and its
// function_call_output items to tool messages. The answer's calls come back
// as function_call output items.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/tool_calls/tool_call_parser.h"

namespace specline::openai {

// tools, tool_choice and parallel_tool_calls of a Responses body into the
// chat body, keeping the client's key order (templates print the tools
// with `tojson`). Hosted tools (web_search, file_search, ...) are refused
// by name.
std::optional<ApiError> ResponsesToolsToChat(const nlohmann::ordered_json& body,
                                             nlohmann::ordered_json* chat);

// A function_call or function_call_output input item (input[i] is `at`)
// appended to the chat messages: consecutive calls join the assistant turn
// before them, as one turn of parallel calls.
std::optional<ApiError> FunctionItemToChat(const nlohmann::ordered_json& item, const std::string& at,
                                           nlohmann::ordered_json* messages);

// A chat error's names in the Responses API's (tools[0].function.name ->
// tools[0].name).
void RenameToolParam(ApiError* e);

// The request's tools and tool_choice as a response object echoes them.
nlohmann::json EchoTools(const ToolRequest& tools);
nlohmann::json EchoToolChoice(const ToolRequest& tools);

// A function_call output item: {type, id, call_id, name, arguments, status}.
nlohmann::json FunctionCallItem(const std::string& item_id, const tool_calls::ToolCall& call,
                                const std::string& status);

}  // namespace specline::openai
