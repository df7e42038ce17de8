#include "services/tool_calls/hermes_parser.h"


namespace specline::tool_calls {

ParsedText HermesParser::Push(std::string_view text) {
  ParsedText out;
  buffer_ += text;
  while (true) {
    if (!in_call_) {
      const size_t open = buffer_.find(kOpen);
      if (open == std::string::npos) {
        // Hold back what may be the start of "<tool_call>".
        const size_t keep = PartialMarkerStart(buffer_, kOpen);
        EmitContent(&out, std::string_view(buffer_).substr(0, keep));
        buffer_.erase(0, keep);
        return out;
      }
      EmitContent(&out, std::string_view(buffer_).substr(0, open));
      buffer_.erase(0, open + kOpen.size());
      in_call_ = true;
    }
    const size_t close = buffer_.find(kClose);
    if (close == std::string::npos) {
      // The call is not finished yet: its arguments so far, short of what
      // may be the start of "</tool_call>".
      ReadCall(&out, std::string_view(buffer_).substr(0, PartialMarkerStart(buffer_, kClose)));
      return out;
    }
    EmitBody(&out, std::string_view(buffer_).substr(0, close), /*closed=*/true);
    buffer_.erase(0, close + kClose.size());
    in_call_ = false;
  }
}

ParsedText HermesParser::Finish() {
  ParsedText out;
  // A call cut off by the end of generation (a stop token in place of
  // "</tool_call>") still counts when its JSON is whole.
  if (in_call_) EmitBody(&out, buffer_, /*closed=*/false);
  else FinishContent(&out, buffer_);
  FinishContent(&out, "");
  buffer_.clear();
  in_call_ = false;
  return out;
}

void HermesParser::EmitBody(ParsedText* out, std::string_view body, bool closed) {
  if (EndCall(out, body)) return;
  std::string text(kOpen);
  text.append(body);
  if (closed) text.append(kClose);
  EmitContent(out, text);
}

}  // namespace specline::tool_calls
