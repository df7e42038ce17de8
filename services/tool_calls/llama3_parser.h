// Llama 3.1-3.3 JSON calls: the whole answer is {"name": ...,
// "parameters": {...}} (several separated by ";" or newlines), optionally
// after <|python_tag|>. As vLLM's llama3_json parser, an answer that does
// not open with one of those is plain text.
#pragma once

#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {

class Llama3Parser final : public ParserBase {
 public:
  Llama3Parser() : ParserBase(Syntax::kLlama3) {}
  ParsedText Push(std::string_view text) override;
  ParsedText Finish() override;
  bool StreamArguments() override { return stream_ = true; }

  static constexpr std::string_view kPythonTag = "<|python_tag|>";

 private:
  // Gives the undecided text back as content (a failed first call keeps
  // the whitespace and <|python_tag|> it opened with).
  void GiveBack(ParsedText* out);
  enum class State { kUndecided, kText, kCalls } state_ = State::kUndecided;
  std::string opening_;  // what was taken off before the first call
  bool made_call_ = false;
};

}  // namespace specline::tool_calls
