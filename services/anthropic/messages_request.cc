#include "services/anthropic/messages_request.h"

#include <set>

namespace specline::anthropic {
namespace {

using json = nlohmann::json;

openai::ApiError Bad(const std::string& field, const std::string& why) { return openai::BadField(field, why); }

// Text blocks' text joined; anything else names its block.
std::optional<openai::ApiError> TextOf(const json& content, const std::string& at, std::string* text) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return Bad(at, "must be a string or a list of content blocks");
  for (size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string at_block = at + "[" + std::to_string(k) + "]";
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
      return Bad(at_block, "only text blocks are supported here");
    if (!text->empty()) *text += "\n";
    *text += b["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<openai::ApiError> ReadUserTurn(const json& content, const std::string& at, json* messages) {
  if (content.is_string()) {
    messages->push_back({{"role", "user"}, {"content", content}});
    return std::nullopt;
  }
  if (!content.is_array()) return Bad(at, "must be a string or a list of content blocks");
  std::string text;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string at_block = at + "[" + std::to_string(k) + "]";
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      if (!text.empty()) text += "\n";
      text += b["text"].get<std::string>();
    } else if (type == "tool_result") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return Bad(at_block + ".tool_use_id", "is required");
      std::string result;
      if (b.contains("content") && !b["content"].is_null()) {
        if (auto e = TextOf(b["content"], at_block + ".content", &result)) return e;
      }
      if (b.value("is_error", false)) result = "Error: " + result;
      messages->push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else {
      return Bad(at_block, "'" + type + "' blocks are not supported in a user turn (text, tool_result)");
    }
  }
  if (!text.empty()) messages->push_back({{"role", "user"}, {"content", text}});
  return std::nullopt;
}

std::optional<openai::ApiError> ReadAssistantTurn(const json& content, const std::string& at, json* messages) {
  json m = {{"role", "assistant"}};
  if (content.is_string()) {
    m["content"] = content;
    messages->push_back(std::move(m));
    return std::nullopt;
  }
  if (!content.is_array()) return Bad(at, "must be a string or a list of content blocks");
  std::string text;
  json calls = json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const json& b = content[k];
    const std::string at_block = at + "[" + std::to_string(k) + "]";
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
    } else if (type == "tool_use") {
      if (!b.contains("id") || !b["id"].is_string()) return Bad(at_block + ".id", "is required");
      if (!b.contains("name") || !b["name"].is_string()) return Bad(at_block + ".name", "is required");
      const json input = b.value("input", json::object());
      if (!input.is_object()) return Bad(at_block + ".input", "must be an object");
      calls.push_back({{"id", b["id"]}, {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else {
      return Bad(at_block, "'" + type + "' blocks are not supported in an assistant turn (text, tool_use)");
    }
  }
  m["content"] = calls.empty() || !text.empty() ? json(text) : json(nullptr);
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  messages->push_back(std::move(m));
  return std::nullopt;
}

std::optional<openai::ApiError> ReadTools(const json& body, json* chat) {
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return Bad("tools", "must be a list");
    json tools = json::array();
    for (size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        return Bad(at + ".name", "is required");
      if (t.contains("type") && t["type"] != "custom")
        return Bad(at + ".type", "only custom (client) tools are supported, not server tools");
      json fn = {{"name", t["name"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      fn["parameters"] = t.value("input_schema", json{{"type", "object"}});
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    (*chat)["tools"] = std::move(tools);
  }
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type")) return Bad("tool_choice", "must be an object with a type");
    const std::string type = (*it)["type"].is_string() ? (*it)["type"].get<std::string>() : "";
    if (type == "auto") (*chat)["tool_choice"] = "auto";
    else if (type == "any") (*chat)["tool_choice"] = "required";
    else if (type == "none") (*chat)["tool_choice"] = "none";
    else if (type == "tool") {
      if (!it->contains("name") || !(*it)["name"].is_string()) return Bad("tool_choice.name", "is required");
      (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*it)["name"]}}}};
    } else {
      return Bad("tool_choice.type", "must be auto, any, tool or none");
    }
    if (it->value("disable_parallel_tool_use", false)) (*chat)["parallel_tool_calls"] = false;
  }
  return std::nullopt;
}


std::optional<openai::ApiError> ParseBody(const json& body, MessagesRequest* out, bool count_only) {
  // Anthropic's fields; ones that change nothing here (metadata beyond
  // user_id, service_tier) are accepted, the rest named.
  static const std::set<std::string> kKnown = {
      "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p",
      "top_k", "stream", "metadata", "tools", "tool_choice", "service_tier", "thinking"};
  for (auto& [key, value] : body.items()) {
    if (!kKnown.count(key)) return Bad(key, "is not supported by this server");
  }
  json chat = json::object();
  if (!body.contains("model") || !body["model"].is_string()) return Bad("model", "is required");
  out->model = body["model"].get<std::string>();
  chat["model"] = out->model;
  // Required, as Anthropic requires it.
  if (!count_only) {
    if (!body.contains("max_tokens") || !body["max_tokens"].is_number_integer() ||
        body["max_tokens"].get<int64_t>() < 1)
      return Bad("max_tokens", "is required, an integer >= 1");
    chat["max_tokens"] = body["max_tokens"];
  }
  // Extended thinking is accepted (Claude Code asks for it) and changes
  // nothing: no thinking blocks come back (docs/anthropic_api.md).
  if (auto it = body.find("thinking"); it != body.end() && !it->is_null() &&
                                       (!it->is_object() || !(*it)["type"].is_string()))
    return Bad("thinking", "must be an object with a type");
  for (const char* f : {"temperature", "top_p", "top_k"}) {
    if (body.contains(f) && !body[f].is_null()) chat[f] = body[f];
  }
  if (auto it = body.find("stop_sequences"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return Bad("stop_sequences", "must be a list of strings");
    chat["stop"] = *it;
  }
  if (auto it = body.find("metadata"); it != body.end() && it->is_object() && it->contains("user_id") &&
                                       (*it)["user_id"].is_string())
    chat["user"] = (*it)["user_id"];
  if (body.contains("stream") && !body["stream"].is_boolean()) return Bad("stream", "must be a boolean");
  out->stream = body.value("stream", false);
  chat["stream"] = out->stream;
  // message_delta carries the usage.
  if (out->stream) chat["stream_options"] = {{"include_usage", true}};

  json messages = json::array();
  if (auto it = body.find("system"); it != body.end() && !it->is_null()) {
    std::string system;
    if (auto e = TextOf(*it, "system", &system)) return e;
    messages.push_back({{"role", "system"}, {"content", system}});
  }
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array() || m->empty()) return Bad("messages", "must be a non-empty list");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& turn = (*m)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!turn.is_object() || !turn.contains("role") || !turn["role"].is_string())
      return Bad(at + ".role", "is required");
    if (!turn.contains("content")) return Bad(at + ".content", "is required");
    const std::string role = turn["role"].get<std::string>();
    std::optional<openai::ApiError> e;
    if (role == "user") {
      e = ReadUserTurn(turn["content"], at + ".content", &messages);
    } else if (role == "assistant") {
      e = ReadAssistantTurn(turn["content"], at + ".content", &messages);
    } else if (role == "system") {  // newer Claude Code sends these in messages
      std::string system;
      e = TextOf(turn["content"], at + ".content", &system);
      if (!e) messages.push_back({{"role", "system"}, {"content", system}});
    } else {
      return Bad(at + ".role", "must be user or assistant");
    }
    if (e) return e;
  }
  // A final assistant turn is a prefill: the model goes on with it.
  out->prefill = messages.back().value("role", "") == "assistant";
  if (out->prefill) {
    chat["add_generation_prompt"] = false;
    chat["continue_final_message"] = true;
  }
  chat["messages"] = std::move(messages);
  if (auto e = ReadTools(body, &chat)) return e;
  out->chat = std::move(chat);
  return std::nullopt;
}

}  // namespace

std::optional<openai::ApiError> ParseMessagesRequest(std::string_view body_text, MessagesRequest* out,
                                                     bool count_only) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return Bad("body", "must be a JSON object");
  try {
    return ParseBody(body, out, count_only);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type deep in a block (value() of a number
    // as a string): still the client's error.
    return Bad("body", std::string("a field has the wrong type (") + e.what() + ")");
  }
}

}  // namespace specline::anthropic
