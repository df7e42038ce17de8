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
  bool StreamArguments() override { return stream_ = true; }

  static constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
  static constexpr std::string_view kArgs = "[ARGS]";

 private:
  // After [TOOL_CALLS]: false while the calls are not complete.
  bool TakeCalls(ParsedText* out);
  bool TakeList(ParsedText* out, size_t start);
  void StreamList(ParsedText* out, size_t start);
  bool TakeArgsForm(ParsedText* out, size_t start);
  bool after_marker_ = false;
  // Streamed lists: where the next element is looked for (0: the list has
  // not begun), and where the open one starts.
  size_t list_next_ = 0, list_element_ = 0;
};

}  // namespace specline::tool_calls
