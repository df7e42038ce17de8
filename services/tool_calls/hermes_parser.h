// Hermes 2/3, Qwen2.5 and Qwen3 calls: each call is a JSON object
// {"name": ..., "arguments": {...}} between "<tool_call>" and
// "</tool_call>" lines, as many as the model makes, after optional text.
#pragma once

#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {

class HermesParser final : public ParserBase {
 public:
  HermesParser() : ParserBase(Syntax::kHermes) {}
  ParsedText Push(std::string_view text) override;
  ParsedText Finish() override;
  bool StreamArguments() override { return stream_ = true; }

  static constexpr std::string_view kOpen = "<tool_call>";
  static constexpr std::string_view kClose = "</tool_call>";

 private:
  // A call's body (between the tags): the call, or its text as content.
  void EmitBody(ParsedText* out, std::string_view body, bool closed);
  bool in_call_ = false;
};

}  // namespace specline::tool_calls
