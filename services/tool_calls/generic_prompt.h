// The generic tool-call form: how tools reach a model whose chat template
// does not render them (SmolLM2's, Llama 2's, Phi-3.5's), as llama-server
// does for such templates. The gateway writes the tools and the reply
// shape into the system message itself, and rewrites the conversation's
// past calls and tool results into text the template can render:
//
//   system: <the client's system text, if any>
//           (or the first user turn, before its text, where the
//           template refuses system turns)
//
//           You can call functions to answer. ...
//           [{"name": ..., "description": ..., "parameters": {...}}, ...]
//           ... {"tool_calls": [{"name": ..., "arguments": {...}}]} ...
//   assistant (a past call): {"tool_calls": [{"name": ..., "arguments": {...}}]}
//   user (a tool result):    {"tool_response": {"tool_call_id": ..., "content": ...}}
//
// The answer is parsed back by GenericParser; tool_choice "required", a
// named function and "auto" are enforced by grammar (tool_call_schema.h).
// docs/openai_api.md "Tool calls" documents the text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "specline/v1/generation.pb.h"

namespace specline::tool_calls {

// The system text that lists `tools` (OpenAI's validated tools) and the
// reply shape.
std::string GenericToolInstructions(const nlohmann::json& tools);

// Rewrites `chat` into the generic form: past calls and tool results become
// text (always), and with `tools` non-null their instructions go at the end
// of the first system message (a new one at the start when there is none).
// A template that refuses system messages (`system_role` false) gets them
// at the start of the first user message instead, as llama-server merges
// a system message into the user's. tools_json is cleared: the template
// cannot render it.
void RewriteForGenericTools(const nlohmann::json* tools, bool system_role, v1::ChatMessages* chat);

}  // namespace specline::tool_calls
