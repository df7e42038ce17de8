// Chat responses of a request whose answer may hold tool calls: the
// model's text goes through the served model's tool-call parser, and the
// calls come out in OpenAI's shape. Not streamed: message.tool_calls
// [{id, type: "function", function: {name, arguments}}], content null when
// there is nothing else, finish_reason "tool_calls". Streamed: content
// deltas for the text, then per call a delta {index, id, type, function:
// {name, arguments: ""}} and the pieces of its arguments as they are
// generated; text that may be the start of a call is held back until the
// parser has decided.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "services/openai/openai_response.h"
#include "services/tool_calls/tool_call_parser.h"

namespace specline::openai {

class ToolCallResponder {
 public:
  // parallel_tool_calls false: only the first call is returned (as vLLM
  // does); the model's further calls are dropped.
  ToolCallResponder(tool_calls::Syntax syntax, const tool_calls::ToolCallSupport& support,
                    const Tokenizer* tokenizer, bool parallel_tool_calls = true);

  // Streamed: the SSE payloads (without "data: ") of choice `index` for one
  // generation message (the role chunk is the caller's, as for plain text).
  // The finish reason goes out last, as "tool_calls" when the answer made
  // calls.
  std::vector<std::string> StreamChunks(const ResponseIdentity& who, int index,
                                        const v1::GenerateResponse& message);

  // Streamed, for any API's events: the content and calls one message
  // resolved into, every call as `deltas` (a parser that gives only whole
  // calls has each turned into its first delta, one with its arguments and
  // the last), parallel_tool_calls applied.
  tool_calls::ParsedText Next(const v1::GenerateResponse& message);
  // Streamed: whether a call went out.
  bool made_calls() const { return calls_sent_ > 0; }

  // Not streamed: collects each message, then the whole response.
  void Collect(const v1::GenerateResponse& message);
  std::string FullResponse(const ResponseIdentity& who, v1::FinishReason finish,
                           const v1::Usage& usage) const;
  // Not streamed, n > 1: the collected answer, parsed.
  tool_calls::ParsedText Parsed() const;

 private:
  std::string ParserText(const v1::GenerateResponse& message) const;

  tool_calls::Syntax syntax_;
  const tool_calls::ToolCallSupport& support_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<tool_calls::ToolCallParser> parser_;
  std::string text_;     // not streamed: the marked text so far
  int calls_sent_ = 0;   // streamed: the calls announced so far
  int whole_calls_ = 0;  // streamed, a parser of whole calls: the calls it gave
  std::string first_call_id_;
  bool streams_arguments_;
  bool parallel_;
};

// Choice `choice` of a whole response (its "message" set) with the calls of
// `parsed` added: message.tool_calls, content null when only calls,
// finish_reason "tool_calls".
void AddToolCalls(const tool_calls::ParsedText& parsed, v1::FinishReason finish,
                  nlohmann::json& choice);

// The pieces, for tests: the whole response for a parsed answer.
std::string ToolCallFullResponse(const ResponseIdentity& who, const tool_calls::ParsedText& parsed,
                                 v1::FinishReason finish, const v1::Usage& usage);

}  // namespace specline::openai
