#include "services/anthropic/messages_response.h"

#include "services/anthropic/anthropic_errors.h"

namespace specline::anthropic {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Event(const char* name, const json& data) {
  return std::string("event: ") + name + "\ndata: " + Dump(data) + "\n\n";
}

// A tool call's arguments as the input object (they are validated JSON
// objects by the parser; anything else is kept as a string field).
json InputOf(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : json{{"arguments", arguments}};
}

}  // namespace

const char* StopReason::Name() const {
  if (finish == v1::FINISH_REASON_LENGTH) return "max_tokens";
  if (!stop_string.empty()) return "stop_sequence";
  return made_calls ? "tool_use" : "end_turn";
}

json UsageJson(const v1::Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens() - usage.cached_tokens()},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", usage.cached_tokens()},
          {"output_tokens", usage.completion_tokens()}};
}

std::string WholeMessage(const std::string& id, const std::string& model,
                         const tool_calls::ParsedText& answer, const StopReason& stop,
                         const v1::Usage& usage) {
  json content = json::array();
  const bool only_space = answer.content.find_first_not_of(" \n\t\r") == std::string::npos;
  if (!answer.content.empty() && !(only_space && !answer.calls.empty()))
    content.push_back({{"type", "text"}, {"text", answer.content}});
  for (const tool_calls::ToolCall& c : answer.calls)
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", InputOf(c.arguments)}});
  const json message = {{"id", id},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model},
                        {"content", std::move(content)},
                        {"stop_reason", stop.Name()},
                        {"stop_sequence", stop.stop_string.empty() ? json(nullptr) : json(stop.stop_string)},
                        {"usage", UsageJson(usage)}};
  return Dump(message);
}

std::string MessageEvents::Start(const v1::Usage& prompt_usage) const {
  v1::Usage prompt_only = prompt_usage;
  prompt_only.set_completion_tokens(0);
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", UsageJson(prompt_only)}};
  return Event("message_start", {{"type", "message_start"}, {"message", message}}) +
         Event("ping", {{"type", "ping"}});
}

std::string MessageEvents::OpenBlock(Block kind, json content_block) {
  std::string out = CloseBlock();
  open_ = kind;
  ++index_;
  return out + Event("content_block_start", {{"type", "content_block_start"},
                                             {"index", index_},
                                             {"content_block", std::move(content_block)}});
}

std::string MessageEvents::CloseBlock() {
  if (open_ == Block::kNone) return "";
  open_ = Block::kNone;
  return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string MessageEvents::Text(std::string_view text) {
  if (text.empty()) return "";
  std::string out;
  if (open_ != Block::kText) out = OpenBlock(Block::kText, {{"type", "text"}, {"text", ""}});
  return out + Event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", index_},
                                             {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string MessageEvents::ToolUse(const std::string& id, const std::string& name) {
  return OpenBlock(Block::kToolUse,
                   {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", json::object()}});
}

std::string MessageEvents::InputJson(std::string_view partial_json) {
  if (open_ != Block::kToolUse || partial_json.empty()) return "";
  return Event("content_block_delta",
               {{"type", "content_block_delta"},
                {"index", index_},
                {"delta", {{"type", "input_json_delta"}, {"partial_json", partial_json}}}});
}

std::string MessageEvents::Finish(const StopReason& stop, const v1::Usage& usage) {
  return CloseBlock() +
         Event("message_delta",
               {{"type", "message_delta"},
                {"delta", {{"stop_reason", stop.Name()},
                           {"stop_sequence", stop.stop_string.empty() ? json(nullptr) : json(stop.stop_string)}}},
                {"usage", UsageJson(usage)}}) +
         Event("message_stop", {{"type", "message_stop"}});
}

std::string MessageEvents::Error(const openai::ApiError& e) {
  return "event: error\ndata: " + ErrorBody(e) + "\n\n";
}

}  // namespace specline::anthropic
