#include "services/openai/responses_tools.h"

#include "absl/strings/str_cat.h"

namespace specline::openai {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// A flat function tool as chat's {"type": "function", "function": {...}}:
// its other fields, in the client's order, become the function's.
std::optional<ApiError> ToolToChat(const ordered_json& tool, const std::string& at, ordered_json* out) {
  if (!tool.is_object()) return BadField(at, "must be an object");
  const ordered_json type = tool.value("type", ordered_json());
  if (type != "function") {
    return BadField(at + ".type",
                    absl::StrCat("only \"function\" tools are supported (this server has no hosted tools; got ",
                                 type.dump(), ")"));
  }
  if (tool.contains("function"))
    return BadField(at + ".function",
                    "the Responses API's function tools are flat: name, parameters and strict beside type");
  if (!tool.contains("name") || !tool["name"].is_string()) return BadField(at + ".name", "must be a string");
  ordered_json function = ordered_json::object();
  for (const auto& [key, value] : tool.items()) {
    if (key != "type") function[key] = value;
  }
  *out = {{"type", "function"}, {"function", std::move(function)}};
  return std::nullopt;
}

std::optional<ApiError> ToolChoiceToChat(const ordered_json& choice, ordered_json* out) {
  if (choice == "none" || choice == "auto" || choice == "required") {
    *out = choice;
    return std::nullopt;
  }
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name") &&
      choice["name"].is_string()) {
    *out = {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
    return std::nullopt;
  }
  return BadField("tool_choice",
                  "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...} "
                  "(this server has no hosted tools)");
}

// A function_call_output's output: a string, or a list of input_text parts.
std::optional<ApiError> OutputText(const ordered_json& output, const std::string& at, std::string* text) {
  if (output.is_string()) {
    *text = output.get<std::string>();
    return std::nullopt;
  }
  if (!output.is_array()) return BadField(at, "must be a string or a list of input_text parts");
  for (size_t k = 0; k < output.size(); ++k) {
    const ordered_json& part = output[k];
    if (!part.is_object() || part.value("type", "") != "input_text" || !part.contains("text") ||
        !part["text"].is_string())
      return BadField(absl::StrCat(at, "[", k, "]"), "only input_text parts are supported");
    *text += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> RequireString(const ordered_json& item, const std::string& at, const char* key) {
  if (!item.contains(key) || !item[key].is_string()) return BadField(at + "." + key, "must be a string");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ResponsesToolsToChat(const ordered_json& body, ordered_json* chat) {
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return BadField("tools", "must be a list of tools");
    ordered_json tools = ordered_json::array();
    for (size_t i = 0; i < it->size(); ++i) {
      ordered_json tool;
      if (auto e = ToolToChat((*it)[i], absl::StrCat("tools[", i, "]"), &tool)) return e;
      tools.push_back(std::move(tool));
    }
    (*chat)["tools"] = std::move(tools);
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    ordered_json choice;
    if (auto e = ToolChoiceToChat(*it, &choice)) return e;
    (*chat)["tool_choice"] = std::move(choice);
  }
  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null())
    (*chat)["parallel_tool_calls"] = *it;
  return std::nullopt;
}

std::optional<ApiError> FunctionItemToChat(const ordered_json& item, const std::string& at,
                                           ordered_json* messages) {
  if (auto e = RequireString(item, at, "call_id")) return e;
  if (item["type"] == "function_call_output") {
    ordered_json message = {{"role", "tool"}, {"tool_call_id", item["call_id"]}};
    std::string text;
    if (auto e = OutputText(item.value("output", ordered_json()), at + ".output", &text)) return e;
    message["content"] = std::move(text);
    messages->push_back(std::move(message));
    return std::nullopt;
  }
  if (auto e = RequireString(item, at, "name")) return e;
  if (auto e = RequireString(item, at, "arguments")) return e;
  ordered_json call = {{"id", item["call_id"]},
                       {"type", "function"},
                       {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
  // The calls of one turn follow the assistant's text (or each other).
  if (messages->empty() || messages->back().value("role", "") != "assistant") {
    messages->push_back({{"role", "assistant"}, {"content", nullptr}});
  }
  ordered_json& turn = messages->back();
  if (!turn.contains("tool_calls")) turn["tool_calls"] = ordered_json::array();
  turn["tool_calls"].push_back(std::move(call));
  return std::nullopt;
}

void RenameToolParam(ApiError* e) {
  // tools[i].function.x -> tools[i].x, in the param and the message's start.
  auto rename = [](std::string* s) {
    if (s->rfind("tools[", 0) != 0) return;
    const size_t at = s->find("].function");
    if (at != std::string::npos && at < s->find(':')) s->erase(at + 1, std::string(".function").size());
  };
  rename(&e->param);
  rename(&e->message);
}

json EchoTools(const ToolRequest& tools) {
  json out = json::array();
  for (const json& tool : tools.tools) {
    json flat = tool["function"];
    flat["type"] = "function";
    if (!flat.contains("strict")) flat["strict"] = nullptr;
    out.push_back(std::move(flat));
  }
  return out;
}

json EchoToolChoice(const ToolRequest& tools) {
  switch (tools.choice) {
    case ToolRequest::Choice::kAuto: return "auto";
    case ToolRequest::Choice::kRequired: return "required";
    case ToolRequest::Choice::kFunction: return {{"type", "function"}, {"name", tools.function}};
    case ToolRequest::Choice::kNone: break;
  }
  return tools.tools.empty() ? "auto" : "none";
}

json FunctionCallItem(const std::string& item_id, const tool_calls::ToolCall& call,
                      const std::string& status) {
  return {{"type", "function_call"}, {"id", item_id},        {"call_id", call.id},
          {"name", call.name},       {"arguments", call.arguments}, {"status", status}};
}

}  // namespace specline::openai
