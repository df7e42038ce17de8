// Tool calls read back out of a model's text. Each family writes its calls
// in its own syntax (the one its chat template teaches it); one parser per
// syntax, behind this interface, turns the text into content and calls.
// Text arrives in pieces (a stream); text that may still turn out to be the
// start of a call is held back until that is decided, so no marker text
// leaks into the content. Text that looked like a call but does not parse
// (malformed JSON, an unknown shape) is given back as content.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "services/tool_calls/tool_call_syntax.h"

namespace specline::tool_calls {

struct ToolCall {
  std::string id;         // "call_..." (Mistral: 9 alphanumerics, as its template demands)
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `arguments` string)
};

// A call as it is generated, from a parser asked to StreamArguments(): the
// first delta of a call names it (id, name; arguments ""), the next ones
// carry the following pieces of its arguments' JSON text, whose
// concatenation is exactly the call's `arguments`; the last has `done`.
struct CallDelta {
  int index = 0;          // the call's place among the answer's calls
  std::string id, name;   // the call's first delta only
  std::string arguments;  // the next piece of the arguments
  bool done = false;      // the call is whole (and in ParsedText::calls)
};

// What one piece of text resolved into: content to show (in order, before
// the calls) and calls that completed with it.
struct ParsedText {
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<CallDelta> deltas;  // streamed arguments, in order (StreamArguments)
  void Append(ParsedText more);
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Feeds the next piece of the model's text.
  virtual ParsedText Push(std::string_view text) = 0;
  // The generation ended: whatever was held back is decided now.
  virtual ParsedText Finish() = 0;
  // Asks for each call's arguments as they are generated (ParsedText::
  // deltas), before the call is whole; false from a parser that gives only
  // whole calls. A streamed call is a call from its first delta on: if its
  // JSON then breaks or is cut off, it ends with the arguments sent so far,
  // and its text is given back as content too (as the non-streamed answer
  // gives it), so the content is the same streamed or not.
  virtual bool StreamArguments() { return false; }
};

// A parser for `syntax` (kNone: everything is content).
std::unique_ptr<ToolCallParser> MakeParser(Syntax syntax);

// A whole text at once (non-streamed responses).
ParsedText ParseAll(Syntax syntax, std::string_view text);

}  // namespace specline::tool_calls
