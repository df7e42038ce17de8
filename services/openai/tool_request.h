// The OpenAI API's tool-calling fields of a chat request: `tools`,
// `tool_choice`, `parallel_tool_calls`, and the tool fields of messages
// (an assistant's `tool_calls`, a tool result's `tool_call_id`). Parsed
// into the GenerateRequest's chat (tools_json, ChatMessage's tool fields),
// which the chat template renders, and into what the gateway needs to
// parse or enforce the calls.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "services/tool_calls/tool_call_syntax.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

struct ApiError;

struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kFunction };
  nlohmann::json tools = nlohmann::json::array();  // validated function tools
  // OpenAI's default: "auto" with tools, "none" without.
  Choice choice = Choice::kNone;
  std::string function;  // kFunction: its name
  bool parallel_tool_calls = true;  // false: only the model's first call is returned
  bool parallel_tool_calls_given = false;  // the client sent parallel_tool_calls
};

// Reads tools, tool_choice and parallel_tool_calls; tools go to
// chat->tools_json.
std::optional<ApiError> ReadTools(const nlohmann::json& body, ToolRequest* out,
                                  v1::ChatMessages* chat);

// The tools and past calls as the client ordered their keys (the request
// is read with sorted keys), since templates print them with `tojson` and
// transformers keeps the client's order.
void KeepClientKeyOrder(std::string_view body_text, v1::ChatMessages* chat);

// A message's tool fields: an assistant's tool_calls, a tool message's
// tool_call_id, and name. `at` is "messages[i]" for errors.
std::optional<ApiError> ReadMessageToolFields(const nlohmann::json& message,
                                              const std::string& at, v1::ChatMessage* out);

// Decides, for the served model, what the request's tools mean: the
// syntax to parse the answer with (*parse_with; kNone: no parsing), a
// 400 when the model cannot take tools, and for "required" or a named
// function the response format that enforces the call.
//
// A template that does not render tools gets them in the generic form
// (tool_calls/generic_prompt.h): written into the system message, parsed
// back as Syntax::kGeneric, "required" / a named function enforced by
// grammar and "auto" held by grammar to text or a reply of calls.
//
// tool_choice "none": as vLLM does by default, the tools are still
// rendered when the template can (the model sees them, and is told by
// nothing but the template not to call); calls are not parsed, so the
// answer is text. A template without tools then gets none (its past calls
// and tool results still become text), not a 400.
std::optional<ApiError> ApplyToolChoice(const ToolRequest& tools,
                                        const tool_calls::ToolCallSupport& support,
                                        v1::GenerateRequest* request,
                                        tool_calls::Syntax* parse_with);

}  // namespace specline::openai
