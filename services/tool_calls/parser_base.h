// What the per-syntax parsers share: the held-back buffer, the rule that
// whitespace around calls is not content, JSON scanning and call ids.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "services/tool_calls/call_reader.h"
#include "services/tool_calls/tool_call_parser.h"

namespace specline::tool_calls {

// Where in `text` a suffix starts that is a proper prefix of `marker` (it
// may become the marker with more text); text.size() when none.
size_t PartialMarkerStart(std::string_view text, std::string_view marker);

// `s[start]` opens a JSON object or array: the index just past its closing
// bracket, or nullopt while it is not closed yet. Strings and escapes are
// honoured, so brackets inside strings do not count.
std::optional<size_t> JsonValueEnd(std::string_view s, size_t start);

// A new call id in the style `syntax` wants.
std::string NewCallId(Syntax syntax);

// {"name": ..., "arguments" | "parameters": {...}} as a call; nullopt when
// the object is not one. Arguments given as a JSON string holding an
// object are accepted too (some models write them so).
std::optional<ToolCall> CallFromJson(const nlohmann::json& call, Syntax syntax);
// A name and its arguments' JSON text; nullopt unless the arguments are an
// object and the name is non-empty.
std::optional<ToolCall> CallFromParts(std::string name, std::string_view arguments, Syntax syntax);

class ParserBase : public ToolCallParser {
 protected:
  explicit ParserBase(Syntax syntax) : syntax_(syntax) {}
  // Content goes out in order; after a call, whitespace is held until
  // something else follows (the newlines between and after calls are the
  // syntax's, not the answer's).
  void EmitContent(ParsedText* out, std::string_view text);
  void EmitCall(ParsedText* out, ToolCall call);
  // The end of the generation: held whitespace after calls is dropped.
  void FinishContent(ParsedText* out, std::string_view rest);

  // Calls read with a CallReader (call_stream.cc), so a call's arguments
  // are the model's own text. Streamed (stream_), a call goes out as
  // deltas while its text arrives: named once its name is known and its
  // arguments' object has opened, then each new piece of the arguments.
  //
  // Begins the next call with `reader` (EndCall begins one if none is).
  void StartCall(CallReader reader = CallReader());
  // The open call's text so far (streamed only; otherwise nothing to do).
  void ReadCall(ParsedText* out, std::string_view text);
  // The call's whole text: true when it is a call (emitted); false when it
  // is not one, for the caller to give back as content. A streamed call
  // that went out and then broke (or was cut off) ends as a call with the
  // arguments sent so far, and is given back too: the content is the
  // non-streamed answer's either way.
  bool EndCall(ParsedText* out, std::string_view text, CallReader reader = CallReader());
  // The call a whole text holds, without emitting it.
  std::optional<ToolCall> WholeCall(std::string_view text, CallReader reader = CallReader()) const;
  bool CallOpen() const { return call_.has_value(); }
  // The open call went out (its first delta): it ends as a call.
  bool CallAnnounced() const { return call_ && call_->announced; }
  void DropCall() { call_.reset(); }

  Syntax syntax_;
  std::string buffer_;  // text received and not yet decided
  bool stream_ = false;  // StreamArguments() was asked

 private:
  struct OpenCall {
    explicit OpenCall(CallReader r) : reader(std::move(r)) {}
    CallReader reader;
    bool announced = false;
    int index = 0;
    std::string id;
    std::string sent;  // the arguments sent so far
  };
  void Announce(ParsedText* out, OpenCall& call);
  void SendArguments(ParsedText* out, OpenCall& call, std::string_view piece);

  bool calls_seen_ = false;
  std::string held_space_;
  std::optional<OpenCall> call_;
  int calls_announced_ = 0;
};

}  // namespace specline::tool_calls
