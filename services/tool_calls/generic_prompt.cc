#include "services/tool_calls/generic_prompt.h"

namespace specline::tool_calls {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A past assistant turn's calls (OpenAI's [{id, type, function: {name,
// arguments: "<JSON text>"}}]) as the reply the model is asked to write.
std::string CallsAsReply(const std::string& tool_calls_json) {
  const json calls = json::parse(tool_calls_json, nullptr, /*allow_exceptions=*/false);
  json reply = json::array();
  if (calls.is_array()) {
    for (const json& call : calls) {
      if (!call.is_object() || !call.contains("function")) continue;
      const json& fn = call["function"];
      json args = fn.value("arguments", json::object());
      if (args.is_string()) {
        json parsed = json::parse(args.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded()) args = std::move(parsed);
      }
      reply.push_back({{"name", fn.value("name", "")}, {"arguments", std::move(args)}});
    }
  }
  return Dump({{"tool_calls", std::move(reply)}});
}

std::string ToolResultAsText(const v1::ChatMessage& m) {
  json result = {{"tool_call_id", m.tool_call_id()}};
  if (!m.name().empty()) result["name"] = m.name();
  result["content"] = m.content();
  return Dump({{"tool_response", std::move(result)}});
}

void AddInstructions(const json& tools, bool system_role, v1::ChatMessages* chat) {
  const std::string text = GenericToolInstructions(tools);
  const std::string role = system_role ? "system" : "user";
  for (v1::ChatMessage& m : *chat->mutable_messages()) {
    if (m.role() != role) continue;
    // After a system message's text; before a user's question.
    if (m.content().empty()) m.set_content(text);
    else m.set_content(system_role ? m.content() + "\n\n" + text : text + "\n\n" + m.content());
    return;
  }
  v1::ChatMessage added;
  added.set_role(role);
  added.set_content(text);
  chat->mutable_messages()->Add(std::move(added));
  // Added last, moved to the front.
  for (int i = chat->messages_size() - 1; i > 0; --i) chat->mutable_messages()->SwapElements(i, i - 1);
}

}  // namespace

std::string GenericToolInstructions(const json& tools) {
  json listed = json::array();
  for (const json& tool : tools) {
    const json& fn = tool["function"];
    json entry = {{"name", fn["name"]}};
    if (fn.contains("description") && fn["description"].is_string()) entry["description"] = fn["description"];
    entry["parameters"] = fn.contains("parameters") && !fn["parameters"].is_null()
                              ? fn["parameters"]
                              : json{{"type", "object"}, {"properties", json::object()}};
    listed.push_back(std::move(entry));
  }
  return "You can call functions to answer. These are the functions, each with the JSON Schema "
         "of its arguments:\n" +
         Dump(listed) +
         "\n\nTo call functions, reply with only this JSON object, one entry per call:\n"
         "{\"tool_calls\": [{\"name\": \"<function name>\", \"arguments\": {<arguments as its "
         "schema says>}}]}\n"
         "Otherwise, answer in plain text. The results of calls come back as "
         "{\"tool_response\": {...}} messages.";
}

void RewriteForGenericTools(const json* tools, bool system_role, v1::ChatMessages* chat) {
  chat->clear_tools_json();
  for (v1::ChatMessage& m : *chat->mutable_messages()) {
    if (!m.tool_calls_json().empty()) {
      const std::string reply = CallsAsReply(m.tool_calls_json());
      m.set_content(m.content_null() || m.content().empty() ? reply : m.content() + "\n" + reply);
      m.set_content_null(false);
      m.clear_tool_calls_json();
    } else if (m.role() == "tool") {
      // As a user turn: templates without tools often know only system,
      // user and assistant.
      m.set_content(ToolResultAsText(m));
      m.set_role("user");
      m.clear_tool_call_id();
      m.clear_name();
    }
  }
  if (tools) AddInstructions(*tools, system_role, chat);
}

}  // namespace specline::tool_calls
