// Mistral calls after the [TOOL_CALLS] control token: a JSON list
// [{"name": ..., "arguments": {...}}, ...] (Mistral 7B v0.3, Nemo), or,
// in the newer tokenizers (Mistral Small 3.2, Devstral, Ministral),
// name[ARGS]{...} with [TOOL_CALLS] before each call.
#pragma once

#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {

class MistralParser final : public ParserBase {
 public:
  MistralParser() : ParserBase(Syntax::kMistral) {}
  ParsedText Push(std::string_view text) override;
  ParsedText Finish() override;

  static constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
  static constexpr std::string_view kArgs = "[ARGS]";

 private:
  // After [TOOL_CALLS]: false while the calls are not complete.
  bool TakeCalls(ParsedText* out);
  bool after_marker_ = false;
};

}  // namespace specline::tool_calls
