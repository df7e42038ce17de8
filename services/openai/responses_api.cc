#include "services/openai/responses_api.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace specline::openai {
namespace {

using nlohmann::json;

// The Responses API's `input` as chat messages.
std::optional<ApiError> InputMessages(const json& input, json* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty())
    return BadField("input", "must be a string or a non-empty list of messages");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string at = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return BadField(at, "must be a message object");
    const std::string type = item.value("type", "message");
    if (type != "message")
      return BadField(at + ".type", "'" + type + "' items are not supported (messages only)");
    if (!item.contains("role") || !item["role"].is_string()) return BadField(at + ".role", "must be a string");
    const json& content = item.value("content", json());
    std::string text;
    if (content.is_string()) {
      text = content.get<std::string>();
    } else if (content.is_array()) {
      for (size_t k = 0; k < content.size(); ++k) {
        const json& part = content[k];
        const std::string kind = part.is_object() ? part.value("type", "") : "";
        if ((kind != "input_text" && kind != "output_text" && kind != "text") ||
            !part.contains("text") || !part["text"].is_string())
          return BadField(absl::StrCat(at, ".content[", k, "]"),
                     "only input_text / output_text parts are supported");
        text += part["text"].get<std::string>();
      }
    } else {
      return BadField(at + ".content", "must be a string or a list of text parts");
    }
    messages->push_back({{"role", item["role"]}, {"content", text}});
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
  return e;
}

}  // namespace

std::optional<ApiError> ParseResponsesRequest(std::string_view body_text, ParsedRequest* out) {
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    ApiError e;
    e.message = "the request body must be a JSON object";
    return e;
  }
  // Accepted and ignored: they do not change the output.
  static const std::set<std::string> ignored = {"store", "metadata", "service_tier", "truncation",
                                                "parallel_tool_calls", "background", "include",
                                                "prompt_cache_key", "safety_identifier"};
  // The sampling fields pass on to the chat parser; vllm-router writes
  // vLLM's extensions (top_k -1, min_p 0, repetition_penalty 1, the
  // penalties 0) into every body it forwards (docs/routers.md).
  static const std::set<std::string> passed = {"model", "temperature", "top_p", "stream", "user",
                                               "seed", "top_k", "min_p", "repetition_penalty",
                                               "frequency_penalty", "presence_penalty", "stop"};
  json chat = json::object();
  json messages = json::array();
  for (const auto& [name, value] : body.items()) {
    if (passed.count(name)) {
      chat[name] = value;
    } else if (ignored.count(name)) {
      if (name == "truncation" && !value.is_null() && value != "disabled")
        return BadField(name, "only \"disabled\" is supported");
      if (name == "background" && value.is_boolean() && value.get<bool>())
        return BadField(name, "background responses are not supported");
    } else if (name == "max_output_tokens") {
      chat["max_tokens"] = value;
    } else if (name == "instructions" || name == "input") {
      // Read below, in order: instructions first.
    } else if (name == "tools" || name == "tool_choice") {
      if (!value.is_null() && value != json::array() && value != "none" && value != "auto")
        return BadField(name, "tools are not supported on /v1/responses yet");
    } else if (name == "text") {
      if (!value.is_null() && value != json{{"format", {{"type", "text"}}}} && value != json::object())
        return BadField("text.format", "only {\"type\": \"text\"} is supported");
    } else if (name == "reasoning") {
      if (!value.is_null() && value != json::object())
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
        return BadField(name, "this server stores no responses; send the whole conversation in input");
    } else {
      return BadField(name, "unrecognized request argument");
    }
  }
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
    : who_(std::move(who)), item_id_("msg_" + who_.id.substr(who_.id.find('_') + 1)) {
  const auto& s = request.request.sampling();
  params_ = {{"temperature", s.temperature()},
             {"top_p", s.top_p() > 0 ? json(s.top_p()) : json(1.0)},
             {"max_output_tokens",
              request.request.max_tokens() > 0 ? json(request.request.max_tokens()) : json(nullptr)},
             {"user", request.user.empty() ? json(nullptr) : json(request.user)}};
}

json ResponsesRender::Message(const std::string& status, const std::string& text) const {
  json content = json::array();
  if (status != "in_progress")
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
  return {{"id", item_id_}, {"type", "message"}, {"status", status}, {"role", "assistant"},
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
            {"parallel_tool_calls", false},
            {"tool_choice", "none"},
            {"tools", json::array()},
            {"text", {{"format", {{"type", "text"}}}}},
            {"metadata", json::object()},
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

}  // namespace

std::string ResponsesRender::Whole(const std::string& text, v1::FinishReason finish,
                                   const v1::Usage& usage) const {
  json o = Object("completed");
  Finish(&o, finish);
  o["output"] = json::array({Message("completed", text)});
  o["output_text"] = text;  // the SDKs' convenience property, sent as a field too
  o["usage"] = UsageOf(usage);
  return Dump(o);
}

std::string ResponsesRender::Event(const std::string& type, json payload) {
  payload["type"] = type;
  payload["sequence_number"] = sequence_++;
  return "event: " + type + "\ndata: " + Dump(payload) + "\n\n";
}

// Each Event numbers itself, so they are appended one statement at a time
// (the operands of one + expression run in no fixed order).
std::string ResponsesRender::Opening() {
  const json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
  std::string out = Event("response.created", {{"response", Object("in_progress")}});
  out += Event("response.output_item.added", {{"output_index", 0}, {"item", Message("in_progress", "")}});
  out += Event("response.content_part.added",
               {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
  return out;
}

std::string ResponsesRender::Delta(const std::string& text) {
  text_ += text;
  return Event("response.output_text.delta", {{"item_id", item_id_},
                                              {"output_index", 0},
                                              {"content_index", 0},
                                              {"delta", text},
                                              {"logprobs", json::array()}});
}

std::string ResponsesRender::Closing(v1::FinishReason finish, const v1::Usage& usage) {
  const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
  json done = Object("completed");
  Finish(&done, finish);
  done["output"] = json::array({Message("completed", text_)});
  done["usage"] = UsageOf(usage);
  const std::string last = done["status"] == "completed" ? "response.completed" : "response.incomplete";
  std::string out = Event("response.output_text.done", {{"item_id", item_id_},
                                                         {"output_index", 0},
                                                         {"content_index", 0},
                                                         {"text", text_},
                                                         {"logprobs", json::array()}});
  out += Event("response.content_part.done",
               {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
  out += Event("response.output_item.done", {{"output_index", 0}, {"item", Message("completed", text_)}});
  out += Event(last, {{"response", std::move(done)}});
  return out;
}

std::string ResponsesRender::Failed(const ApiError& error) {
  json o = Object("failed");
  o["error"] = {{"code", error.code.empty() ? json("server_error") : json(error.code)},
                {"message", error.message}};
  return Event("response.failed", {{"response", std::move(o)}});
}

}  // namespace specline::openai
