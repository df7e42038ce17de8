#include "services/tool_calls/llama3_parser.h"

namespace specline::tool_calls {
namespace {

size_t SkipSeparators(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r' || s[i] == ';'))
    ++i;
  return i;
}

}  // namespace

ParsedText Llama3Parser::Push(std::string_view text) {
  ParsedText out;
  buffer_ += text;
  if (state_ == State::kUndecided) {
    const size_t first = buffer_.find_first_not_of(" \n\t\r");
    if (first == std::string::npos) return out;  // only whitespace so far
    const std::string_view rest = std::string_view(buffer_).substr(first);
    if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
      opening_ = buffer_.substr(0, first + kPythonTag.size());
      buffer_.erase(0, first + kPythonTag.size());
      state_ = State::kCalls;
    } else if (rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest) {
      return out;  // may still become <|python_tag|>
    } else if (rest[0] == '{') {
      opening_ = buffer_.substr(0, first);
      buffer_.erase(0, first);
      state_ = State::kCalls;
    } else {
      state_ = State::kText;
    }
  }
  if (state_ == State::kText) {
    EmitContent(&out, buffer_);
    buffer_.clear();
    return out;
  }
  while (true) {
    const size_t start = SkipSeparators(buffer_, 0);
    if (start == buffer_.size()) return out;
    if (buffer_[start] != '{') break;
    const std::string_view call = std::string_view(buffer_).substr(start);
    const std::optional<size_t> end = JsonValueEnd(call, 0);
    if (!end) {
      ReadCall(&out, call);  // the object is not closed yet
      return out;
    }
    if (!EndCall(&out, call.substr(0, *end))) break;
    made_call_ = true;
    buffer_.erase(0, start + *end);
  }
  // Not a call: the rest of the answer is text.
  state_ = State::kText;
  GiveBack(&out);
  return out;
}

void Llama3Parser::GiveBack(ParsedText* out) {
  if (!made_call_) EmitContent(out, opening_);
  opening_.clear();
  EmitContent(out, buffer_);
  buffer_.clear();
}

ParsedText Llama3Parser::Finish() {
  ParsedText out;
  // A call cut off after its name and arguments counts (EndCall).
  const size_t start = SkipSeparators(buffer_, 0);
  if (state_ == State::kCalls && start < buffer_.size() && buffer_[start] == '{' &&
      EndCall(&out, std::string_view(buffer_).substr(start))) {
    made_call_ = true;
    buffer_.clear();
  }
  DropCall();
  // Separators after the last call are the syntax's; an unfinished call is text.
  if (state_ == State::kCalls && made_call_ && SkipSeparators(buffer_, 0) == buffer_.size())
    buffer_.clear();
  GiveBack(&out);
  FinishContent(&out, "");
  state_ = State::kUndecided;
  made_call_ = false;
  return out;
}

}  // namespace specline::tool_calls
