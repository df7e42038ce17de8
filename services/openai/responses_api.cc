#include "services/openai/responses_api.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "services/openai/responses_tools.h"

namespace specline::openai {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// A message item's content: a string, or input_text / output_text parts.
std::optional<ApiError> MessageText(const ordered_json& content, const std::string& at, std::string* text) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return BadField(at, "must be a string or a list of text parts");
  for (size_t k = 0; k < content.size(); ++k) {
    const ordered_json& part = content[k];
    const std::string kind = part.is_object() ? part.value("type", "") : "";
    if ((kind != "input_text" && kind != "output_text" && kind != "text") || !part.contains("text") ||
        !part["text"].is_string())
      return BadField(absl::StrCat(at, "[", k, "]"), "only input_text / output_text parts are supported");
    *text += part["text"].get<std::string>();
  }
  return std::nullopt;
}

// The Responses API's `input` as chat messages: message items, and the
// function_call / function_call_output items of a tool round trip
// (responses_tools.h).
std::optional<ApiError> InputMessages(const ordered_json& input, ordered_json* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty())
    return BadField("input", "must be a string or a non-empty list of messages");
  for (size_t i = 0; i < input.size(); ++i) {
    const ordered_json& item = input[i];
    const std::string at = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return BadField(at, "must be a message object");
    const std::string type = item.value("type", "message");
    if (type == "function_call" || type == "function_call_output") {
      if (auto e = FunctionItemToChat(item, at, messages)) return e;
      continue;
    }
    if (type == "item_reference")
      return BadField(at + ".type", "this server stores no items; send the items themselves");
    if (type != "message")
      return BadField(at + ".type", "'" + type +
                                        "' items are not supported (message, function_call and "
                                        "function_call_output only)");
    if (!item.contains("role") || !item["role"].is_string()) return BadField(at + ".role", "must be a string");
    std::string text;
    if (auto e = MessageText(item.value("content", ordered_json()), at + ".content", &text)) return e;
    messages->push_back({{"role", item["role"]}, {"content", std::move(text)}});
  }
  return std::nullopt;
}

// Chat-API names in an error, back in the Responses API's.
ApiError Renamed(ApiError e) {
  auto rename = [&](const std::string& from, const std::string& to) {
    if (e.param.rfind(from, 0) != 0) return;
    e.param = to + e.param.substr(from.size());
    if (e.message.rfind(from, 0) == 0) e.message = to + e.message.substr(from.size());
  };
  rename("max_tokens", "max_output_tokens");
  rename("messages", "input");
  RenameToolParam(&e);
  return e;
}

// One field of a Responses body: passed on to the chat body, accepted, or
// refused.
std::optional<ApiError> ReadField(const std::string& name, const ordered_json& value, ordered_json* chat) {
  // Accepted and ignored: they do not change the output. `store`: nothing
  // is ever stored, whatever it says.
  static const std::set<std::string> ignored = {"store", "metadata", "service_tier", "truncation",
                                                "background", "include", "prompt_cache_key",
                                                "safety_identifier"};
  // The sampling fields pass on to the chat parser; vllm-router writes
  // vLLM's extensions (top_k -1, min_p 0, repetition_penalty 1, the
  // penalties 0) into every body it forwards (docs/routers.md).
  static const std::set<std::string> passed = {"model", "temperature", "top_p", "stream", "user",
                                               "seed", "top_k", "min_p", "repetition_penalty",
                                               "frequency_penalty", "presence_penalty", "stop"};
  if (passed.count(name)) {
    (*chat)[name] = value;
  } else if (ignored.count(name)) {
    if (name == "truncation" && !value.is_null() && value != "disabled")
      return BadField(name, "only \"disabled\" is supported");
    if (name == "background" && value.is_boolean() && value.get<bool>())
      return BadField(name, "background responses are not supported");
  } else if (name == "max_output_tokens") {
    (*chat)["max_tokens"] = value;
  } else if (name == "instructions" || name == "input" || name == "tools" || name == "tool_choice" ||
             name == "parallel_tool_calls") {
    // Read after the loop.
  } else if (name == "text") {
    if (!value.is_null() && value != ordered_json{{"format", {{"type", "text"}}}} && value != ordered_json::object())
      return BadField("text.format", "only {\"type\": \"text\"} is supported");
  } else if (name == "reasoning") {
    if (!value.is_null() && value != ordered_json::object())
      return BadField(name, "reasoning options are not supported by this server");
  } else if (name == "request_id") {
    // vLLM's: the router's id for its logs; the response's id is this
    // server's own.
    if (!value.is_null() && !value.is_string()) return BadField(name, "must be a string");
  } else if (name == "priority") {
    if (!value.is_null() && value != 0)
      return BadField(name, "only 0 is supported: this server does not schedule by priority");
  } else if (name == "top_logprobs") {
    if (!value.is_null() && value != 0)
      return BadField(name, "logprobs are not returned on /v1/responses yet (0 only)");
  } else if (name == "previous_response_id" || name == "conversation") {
    if (!value.is_null())
      return BadField(name, "this server keeps no stored responses (store is always false); send the "
                            "whole conversation in input");
  } else {
    return BadField(name, "unrecognized request argument");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseResponsesRequest(std::string_view body_text, ParsedRequest* out) {
  // Read in the client's key order: the tools reach the template as sent.
  ordered_json body = ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    ApiError e;
    e.message = "the request body must be a JSON object";
    return e;
  }
  ordered_json chat = ordered_json::object();
  for (const auto& [name, value] : body.items()) {
    if (auto e = ReadField(name, value, &chat)) return e;
  }
  if (auto e = ResponsesToolsToChat(body, &chat)) return e;
  ordered_json messages = ordered_json::array();
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return BadField("instructions", "must be a string");
    messages.push_back({{"role", "system"}, {"content", *it}});
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) return BadField("input", "is required");
  if (auto e = InputMessages(*input, &messages)) return e;
  chat["messages"] = std::move(messages);
  if (auto e = ParseRequest(Endpoint::kChatCompletions, chat.dump(), out)) return Renamed(*e);
  return std::nullopt;
}

ResponsesRender::ResponsesRender(ResponseIdentity who, const ParsedRequest& request)
    : who_(std::move(who)), id_suffix_(who_.id.substr(who_.id.find('_') + 1)) {
  const auto& s = request.request.sampling();
  params_ = {{"temperature", s.temperature()},
             {"top_p", s.top_p() > 0 ? json(s.top_p()) : json(1.0)},
             {"max_output_tokens",
              request.request.max_tokens() > 0 ? json(request.request.max_tokens()) : json(nullptr)},
             {"user", request.user.empty() ? json(nullptr) : json(request.user)},
             {"tools", EchoTools(request.tools)},
             {"tool_choice", EchoToolChoice(request.tools)},
             {"parallel_tool_calls", request.tools.parallel_tool_calls}};
}

std::string ResponsesRender::ItemId(const char* prefix, size_t output_index) const {
  // The first item keeps the plain id; later ones are numbered.
  return absl::StrCat(prefix, id_suffix_, output_index == 0 ? "" : absl::StrCat("_", output_index));
}

json ResponsesRender::Message(const std::string& id, const std::string& status,
                              const std::string& text) const {
  json content = json::array();
  if (status != "in_progress")
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"},
          {"content", std::move(content)}};
}

json ResponsesRender::Object(const std::string& status) const {
  json o = {{"id", who_.id},
            {"object", "response"},
            {"created_at", who_.created},
            {"status", status},
            {"model", who_.model},
            {"output", json::array()},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"instructions", nullptr},
            {"text", {{"format", {{"type", "text"}}}}},
            {"metadata", json::object()},
            {"store", false},  // nothing is kept
            {"usage", nullptr}};
  o.update(params_);
  return o;
}

namespace {

json UsageOf(const v1::Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens()},
          {"input_tokens_details", {{"cached_tokens", usage.cached_tokens()}}},
          {"output_tokens", usage.completion_tokens()},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", usage.prompt_tokens() + usage.completion_tokens()}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A length stop is the Responses API's "incomplete".
void Finish(json* o, v1::FinishReason finish) {
  if (finish == v1::FINISH_REASON_LENGTH) {
    (*o)["status"] = "incomplete";
    (*o)["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
}

bool OnlySpace(const std::string& s) { return s.find_first_not_of(" \n\t\r") == std::string::npos; }

}  // namespace

std::string ResponsesRender::Whole(const tool_calls::ParsedText& answer, v1::FinishReason finish,
                                   const v1::Usage& usage) const {
  json o = Object("completed");
  Finish(&o, finish);
  // The text as a message item (whitespace around calls is the syntax's),
  // then one function_call item per call.
  const bool message = answer.calls.empty() || !OnlySpace(answer.content);
  if (message) o["output"].push_back(Message(ItemId("msg_", 0), "completed", answer.content));
  for (const tool_calls::ToolCall& call : answer.calls) {
    const size_t index = o["output"].size();
    o["output"].push_back(FunctionCallItem(ItemId("fc_", index), call, "completed"));
  }
  o["output_text"] = message ? answer.content : "";  // the SDKs' convenience property, sent too
  o["usage"] = UsageOf(usage);
  return Dump(o);
}

std::string ResponsesRender::Whole(const std::string& text, v1::FinishReason finish,
                                   const v1::Usage& usage) const {
  tool_calls::ParsedText answer;
  answer.content = text;
  return Whole(answer, finish, usage);
}

std::string ResponsesRender::Event(const std::string& type, json payload) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + Dump(payload) + "\n\n";
}

// Each Event numbers itself, so they are appended one statement at a time
// (the operands of one + expression run in no fixed order).
std::string ResponsesRender::Opening() {
  return Event("response.created", {{"response", Object("in_progress")}});
}

// The message item opens with its first text, so an answer that is only
// calls has none.
std::string ResponsesRender::OpenMessage() {
  if (message_) return "";
  message_ = output_.size();
  text_.clear();
  const std::string id = ItemId("msg_", *message_);
  output_.push_back(Message(id, "in_progress", ""));
  const json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
  std::string out = Event("response.output_item.added", {{"output_index", *message_}, {"item", output_.back()}});
  out += Event("response.content_part.added",
               {{"item_id", id}, {"output_index", *message_}, {"content_index", 0}, {"part", part}});
  return out;
}

std::string ResponsesRender::CloseMessage() {
  if (!message_) return "";
  const size_t index = *message_;
  message_.reset();
  const std::string id = output_[index]["id"];
  output_[index] = Message(id, "completed", text_);
  const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
  std::string out = Event("response.output_text.done", {{"item_id", id},
                                                         {"output_index", index},
                                                         {"content_index", 0},
                                                         {"text", text_},
                                                         {"logprobs", json::array()}});
  out += Event("response.content_part.done",
               {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += Event("response.output_item.done", {{"output_index", index}, {"item", output_[index]}});
  return out;
}

std::string ResponsesRender::Delta(const std::string& text) {
  std::string out = OpenMessage();
  text_ += text;
  out += Event("response.output_text.delta", {{"item_id", output_[*message_]["id"]},
                                              {"output_index", *message_},
                                              {"content_index", 0},
                                              {"delta", text},
                                              {"logprobs", json::array()}});
  return out;
}

// A call's events: output_item.added (arguments ""), the arguments'
// deltas as they are generated, then function_call_arguments.done and
// output_item.done.
std::string ResponsesRender::CallEvent(const tool_calls::CallDelta& d) {
  std::string out;
  if (!d.id.empty()) {
    out += CloseMessage();
    calls_[d.index] = output_.size();
    output_.push_back(FunctionCallItem(ItemId("fc_", output_.size()), {d.id, d.name, ""}, "in_progress"));
    out += Event("response.output_item.added", {{"output_index", calls_[d.index]}, {"item", output_.back()}});
  }
  auto at = calls_.find(d.index);
  if (at == calls_.end()) return out;
  json& item = output_[at->second];
  if (!d.arguments.empty()) {
    item["arguments"] = item["arguments"].get<std::string>() + d.arguments;
    out += Event("response.function_call_arguments.delta",
                 {{"item_id", item["id"]}, {"output_index", at->second}, {"delta", d.arguments}});
  }
  if (d.done) {
    item["status"] = "completed";
    out += Event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                           {"output_index", at->second},
                                                           {"name", item["name"]},
                                                           {"arguments", item["arguments"]}});
    out += Event("response.output_item.done", {{"output_index", at->second}, {"item", item}});
  }
  return out;
}

std::string ResponsesRender::Parsed(const tool_calls::ParsedText& parsed) {
  std::string out;
  if (!parsed.content.empty()) out += Delta(parsed.content);
  for (const tool_calls::CallDelta& d : parsed.deltas) out += CallEvent(d);
  return out;
}

std::string ResponsesRender::Closing(v1::FinishReason finish, const v1::Usage& usage) {
  // An answer without any item still has its (empty) message.
  std::string out = output_.empty() ? OpenMessage() : "";
  out += CloseMessage();
  json done = Object("completed");
  Finish(&done, finish);
  done["output"] = output_;
  done["usage"] = UsageOf(usage);
  const std::string last = done["status"] == "completed" ? "response.completed" : "response.incomplete";
  out += Event(last, {{"response", std::move(done)}});
  return out;
}

std::string ResponsesRender::Failed(const ApiError& error) {
  json o = Object("failed");
  o["output"] = output_;
  o["error"] = {{"code", error.code.empty() ? json("server_error") : json(error.code)},
                {"message", error.message}};
  return Event("response.failed", {{"response", std::move(o)}});
}

}  // namespace specline::openai
