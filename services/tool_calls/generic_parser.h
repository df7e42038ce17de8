// The generic tool-call form (generic_prompt.h), for a served model whose
// chat template does not render tools: the whole answer is either plain
// text or one JSON object {"tool_calls": [{"name": ..., "arguments":
// {...}}, ...]} (llama.cpp's older single {"tool_call": {...}} is read
// too). An answer that opens with "{" but not with that object's opening
// is text; an entry of the list that is not a call ends the calls, and
// the text from it on is content. Calls stream as the other syntaxes'
// do (ParserBase's StartCall / ReadCall / EndCall).
#pragma once

#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {

class GenericParser final : public ParserBase {
 public:
  GenericParser() : ParserBase(Syntax::kGeneric) {}
  ParsedText Push(std::string_view text) override;
  ParsedText Finish() override;
  bool StreamArguments() override { return stream_ = true; }

 private:
  // Reads the opening {"tool_calls": [ (or {"tool_call": ) off the buffer;
  // false while it may still come (the buffer is a prefix of one).
  bool ReadOpening();
  // Reads calls and the syntax between and after them off the buffer.
  void ReadCalls(ParsedText* out);
  // The undecided text goes out as content (with the opening when no call
  // was made).
  void GiveBack(ParsedText* out);

  // kUndecided: only whitespace so far. kOpening: the answer opened with
  // "{". kCalls: inside the object, between calls. kText: everything is
  // content. kAfterCalls: the calls are over; what follows is content.
  enum class State { kUndecided, kOpening, kCalls, kText, kAfterCalls } state_ = State::kUndecided;
  bool single_ = false;      // {"tool_call": {...}}: one call, no list
  bool expect_call_ = true;  // kCalls: a call comes next (else a separator)
  std::string closing_;      // kCalls, after the last call: the brackets still to come
  std::string opening_;      // the object's opening, given back if no call is made
  bool made_call_ = false;
};

}  // namespace specline::tool_calls
