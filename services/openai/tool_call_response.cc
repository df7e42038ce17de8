#include "services/openai/tool_call_response.h"

#include <nlohmann/json.hpp>

namespace specline::openai {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool OnlySpace(const std::string& s) { return s.find_first_not_of(" \n\t\r") == std::string::npos; }

// OpenAI's finish reason for an answer that made calls.
json FinishName(v1::FinishReason finish, bool made_calls) {
  if (made_calls && finish == v1::FINISH_REASON_STOP) return "tool_calls";
  const char* name = FinishReasonName(finish);
  return *name ? json(name) : json(nullptr);
}

}  // namespace

std::string ToolCallFullResponse(const ResponseIdentity& who, const tool_calls::ParsedText& parsed,
                                 v1::FinishReason finish, const v1::Usage& usage) {
  // The plain response's envelope, usage and fields, with the calls added.
  json j = json::parse(openai::FullResponse(who, parsed.content, finish, usage));
  if (parsed.calls.empty()) return Dump(j);
  json calls = json::array();
  for (const tool_calls::ToolCall& c : parsed.calls) {
    calls.push_back({{"id", c.id},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  json& choice = j["choices"][0];
  choice["message"]["tool_calls"] = std::move(calls);
  if (OnlySpace(parsed.content)) choice["message"]["content"] = nullptr;
  choice["finish_reason"] = FinishName(finish, true);
  return Dump(j);
}

ToolCallResponder::ToolCallResponder(tool_calls::Syntax syntax,
                                     const tool_calls::ToolCallSupport& support,
                                     const Tokenizer* tokenizer, bool parallel_tool_calls)
    : syntax_(syntax), support_(support), tokenizer_(tokenizer),
      parser_(tool_calls::MakeParser(syntax)), parallel_(parallel_tool_calls) {}

std::string ToolCallResponder::ParserText(const v1::GenerateResponse& message) const {
  return tool_calls::MarkedText(support_.markers, tokenizer_, message.token_ids().data(),
                                message.token_ids_size(), message.text());
}

void ToolCallResponder::Collect(const v1::GenerateResponse& message) {
  text_ += ParserText(message);
}

std::string ToolCallResponder::FullResponse(const ResponseIdentity& who, v1::FinishReason finish,
                                            const v1::Usage& usage) const {
  tool_calls::ParsedText parsed = tool_calls::ParseAll(syntax_, text_);
  if (!parallel_ && parsed.calls.size() > 1) parsed.calls.resize(1);
  return ToolCallFullResponse(who, parsed, finish, usage);
}

std::vector<std::string> ToolCallResponder::StreamChunks(const ResponseIdentity& who,
                                                         const v1::GenerateResponse& message,
                                                         bool first) {
  const bool finished = message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  tool_calls::ParsedText parsed = parser_->Push(ParserText(message));
  if (finished) parsed.Append(parser_->Finish());
  std::vector<std::string> chunks;
  // The plain chunk's envelope, for the text and as the frame of each call.
  v1::GenerateResponse text_only = message;
  text_only.clear_token_ids();
  text_only.set_finish_reason(v1::FINISH_REASON_UNSPECIFIED);
  text_only.set_text(parsed.content);
  if (!parsed.content.empty() || first) chunks.push_back(StreamChunk(who, text_only, first));
  text_only.set_text("");
  for (const tool_calls::ToolCall& c : parsed.calls) {
    if (!parallel_ && calls_sent_ > 0) break;
    json head = json::parse(StreamChunk(who, text_only, false));
    head["choices"][0]["delta"] = {
        {"tool_calls",
         json::array({{{"index", calls_sent_},
                       {"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", ""}}}}})}};
    chunks.push_back(Dump(head));
    json args = json::parse(StreamChunk(who, text_only, false));
    args["choices"][0]["delta"] = {
        {"tool_calls",
         json::array({{{"index", calls_sent_}, {"function", {{"arguments", c.arguments}}}}})}};
    chunks.push_back(Dump(args));
    ++calls_sent_;
  }
  if (finished) {
    json last = json::parse(StreamChunk(who, text_only, false));
    last["choices"][0]["delta"] = json::object();
    last["choices"][0]["finish_reason"] = FinishName(message.finish_reason(), calls_sent_ > 0);
    chunks.push_back(Dump(last));
  }
  return chunks;
}

}  // namespace specline::openai
