// The generic tool-call form (generic_prompt.h), for a served model whose
// chat template does not render tools: the whole answer is either plain
// text or one JSON object {"tool_calls": [{"name": ..., "arguments":
// {...}}, ...]} (llama.cpp's older single {"tool_call": {...}} is read
// too). An answer that opens with "{" but is not that object is text.
#pragma once

#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {

class GenericParser final : public ParserBase {
 public:
  GenericParser() : ParserBase(Syntax::kGeneric) {}
  ParsedText Push(std::string_view text) override;
  ParsedText Finish() override;

 private:
  // The calls `object` holds; empty when it is not a reply of calls.
  std::vector<ToolCall> CallsOf(const nlohmann::json& object) const;
  // The held text goes out as content; the rest of the answer is text.
  void GiveBack(ParsedText* out);

  // kUndecided: only whitespace so far. kObject: the answer opened with
  // "{", held until the object closes. kText: everything is content.
  // kAfterCalls: the calls went out; what follows is content.
  enum class State { kUndecided, kObject, kText, kAfterCalls } state_ = State::kUndecided;
};

}  // namespace specline::tool_calls
