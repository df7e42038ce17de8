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

void AddToolCalls(const tool_calls::ParsedText& parsed, v1::FinishReason finish, json& choice) {
  if (parsed.calls.empty()) return;
  json calls = json::array();
  for (const tool_calls::ToolCall& c : parsed.calls) {
    calls.push_back({{"id", c.id},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  choice["message"]["tool_calls"] = std::move(calls);
  if (OnlySpace(parsed.content)) choice["message"]["content"] = nullptr;
  choice["finish_reason"] = FinishName(finish, true);
}

std::string ToolCallFullResponse(const ResponseIdentity& who, const tool_calls::ParsedText& parsed,
                                 v1::FinishReason finish, const v1::Usage& usage) {
  // The plain response's envelope, usage and fields, with the calls added.
  json j = json::parse(openai::FullResponse(who, {ChoiceResult{parsed.content, finish, {}}}, usage));
  AddToolCalls(parsed, finish, j["choices"][0]);
  return Dump(j);
}

ToolCallResponder::ToolCallResponder(tool_calls::Syntax syntax,
                                     const tool_calls::ToolCallSupport& support,
                                     const Tokenizer* tokenizer, bool parallel_tool_calls)
    : syntax_(syntax), support_(support), tokenizer_(tokenizer),
      parser_(tool_calls::MakeParser(syntax)), streams_arguments_(parser_->StreamArguments()),
      parallel_(parallel_tool_calls) {}

std::string ToolCallResponder::ParserText(const v1::GenerateResponse& message) const {
  return tool_calls::MarkedText(support_.markers, tokenizer_, message.token_ids().data(),
                                message.token_ids_size(), message.text());
}

void ToolCallResponder::Collect(const v1::GenerateResponse& message) {
  text_ += ParserText(message);
}

tool_calls::ParsedText ToolCallResponder::Parsed() const {
  tool_calls::ParsedText parsed = tool_calls::ParseAll(syntax_, text_);
  if (!parallel_ && parsed.calls.size() > 1) parsed.calls.resize(1);
  return parsed;
}

std::string ToolCallResponder::FullResponse(const ResponseIdentity& who, v1::FinishReason finish,
                                            const v1::Usage& usage) const {
  return ToolCallFullResponse(who, Parsed(), finish, usage);
}

tool_calls::ParsedText ToolCallResponder::Next(const v1::GenerateResponse& message) {
  tool_calls::ParsedText parsed = parser_->Push(ParserText(message));
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) parsed.Append(parser_->Finish());
  if (!streams_arguments_) {
    // Whole calls, each as the deltas a streaming parser would send.
    for (tool_calls::ToolCall& c : parsed.calls) {
      const int index = whole_calls_++;
      parsed.deltas.push_back({index, c.id, c.name, "", false});
      parsed.deltas.push_back({index, "", "", c.arguments, false});
      parsed.deltas.push_back({index, "", "", "", true});
    }
  }
  // parallel_tool_calls false: the first call only.
  std::vector<tool_calls::CallDelta> kept;
  for (tool_calls::CallDelta& d : parsed.deltas) {
    if (!parallel_ && d.index > 0) continue;
    if (!d.id.empty()) ++calls_sent_;
    if (!d.id.empty() && d.index == 0) first_call_id_ = d.id;
    kept.push_back(std::move(d));
  }
  parsed.deltas = std::move(kept);
  if (!parallel_) {
    std::erase_if(parsed.calls, [&](const tool_calls::ToolCall& c) { return c.id != first_call_id_; });
  }
  return parsed;
}

std::vector<std::string> ToolCallResponder::StreamChunks(const ResponseIdentity& who, int index,
                                                         const v1::GenerateResponse& message) {
  const tool_calls::ParsedText parsed = Next(message);
  std::vector<std::string> chunks;
  if (!parsed.content.empty()) chunks.push_back(TextChunk(who, index, parsed.content));
  // Each call as OpenAI streams one: a delta naming it (arguments ""), then
  // the pieces of its arguments, in the frame of a plain chunk of this
  // choice.
  auto call_chunk = [&](json call) {
    json j = json::parse(TextChunk(who, index, ""));
    j["choices"][0]["delta"] = {{"tool_calls", json::array({std::move(call)})}};
    return Dump(j);
  };
  for (const tool_calls::CallDelta& d : parsed.deltas) {
    if (!d.id.empty()) {
      chunks.push_back(call_chunk({{"index", d.index},
                                   {"id", d.id},
                                   {"type", "function"},
                                   {"function", {{"name", d.name}, {"arguments", ""}}}}));
    } else if (!d.arguments.empty()) {
      chunks.push_back(call_chunk({{"index", d.index}, {"function", {{"arguments", d.arguments}}}}));
    }
  }
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    json last = json::parse(FinishChunk(who, index, message.finish_reason()));
    last["choices"][0]["finish_reason"] = FinishName(message.finish_reason(), made_calls());
    chunks.push_back(Dump(last));
  }
  return chunks;
}

}  // namespace specline::openai
