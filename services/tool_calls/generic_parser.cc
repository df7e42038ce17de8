#include "services/tool_calls/generic_parser.h"

namespace specline::tool_calls {
namespace {

constexpr std::string_view kSpace = " \n\t\r";

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && kSpace.find(s[i]) != std::string_view::npos) ++i;
  return i;
}

// Matches `want` at s[i]: 1 when it is there (i moves past it), 0 when s
// ends inside it, -1 when s differs.
int Expect(std::string_view s, size_t* i, std::string_view want) {
  const std::string_view have = s.substr(*i, want.size());
  if (have != want.substr(0, have.size())) return -1;
  if (have.size() < want.size()) return 0;
  *i += want.size();
  return 1;
}

}  // namespace

bool GenericParser::ReadOpening() {
  // {  "tool_calls" : [      or      {  "tool_call" :
  size_t i = buffer_.find('{') + 1;
  i = SkipSpace(buffer_, i);
  int list = Expect(buffer_, &i, "\"tool_calls\"");
  int single = list == 1 ? -1 : Expect(buffer_, &i, "\"tool_call\"");
  if (list == 0 || single == 0) return false;
  if (list < 0 && single < 0) {
    state_ = State::kText;
    return true;
  }
  single_ = single == 1;
  const std::string_view punctuation = single_ ? ":" : ":[";
  for (size_t k = 0; k < punctuation.size(); ++k) {
    i = SkipSpace(buffer_, i);
    const int got = Expect(buffer_, &i, punctuation.substr(k, 1));
    if (got == 0) return false;
    if (got < 0) {
      state_ = State::kText;
      return true;
    }
  }
  opening_ = buffer_.substr(0, i);
  buffer_.erase(0, i);
  closing_ = single_ ? "}" : "]}";
  state_ = State::kCalls;
  return true;
}

void GenericParser::ReadCalls(ParsedText* out) {
  while (state_ == State::kCalls) {
    const size_t i = SkipSpace(buffer_, 0);
    if (i == buffer_.size()) return;  // more is to come
    const char c = buffer_[i];
    if (expect_call_) {
      const std::string_view call = std::string_view(buffer_).substr(i);
      const std::optional<size_t> end = c == '{' ? JsonValueEnd(call, 0) : std::nullopt;
      if (c == '{' && !end) {
        ReadCall(out, call);  // the call is not closed yet
        return;
      }
      if (c != '{' || !EndCall(out, call.substr(0, *end))) {
        state_ = made_call_ ? State::kAfterCalls : State::kText;
        return;
      }
      made_call_ = true;
      expect_call_ = false;
      buffer_.erase(0, i + *end);
      continue;
    }
    // Between and after calls: "," and another call (a list only), or the
    // closing brackets; anything else ends the calls.
    if (c == ',' && !single_ && closing_ == "]}") {
      expect_call_ = true;
    } else if (c == closing_[0]) {
      closing_.erase(0, 1);
      if (closing_.empty()) state_ = State::kAfterCalls;
    } else {
      state_ = State::kAfterCalls;
      return;
    }
    buffer_.erase(0, i + 1);
  }
}

ParsedText GenericParser::Push(std::string_view text) {
  ParsedText out;
  buffer_ += text;
  if (state_ == State::kUndecided) {
    const size_t first = buffer_.find_first_not_of(kSpace);
    if (first == std::string::npos) return out;  // only whitespace so far
    state_ = buffer_[first] == '{' ? State::kOpening : State::kText;
  }
  if (state_ == State::kOpening && !ReadOpening()) return out;
  ReadCalls(&out);
  if (state_ == State::kText || state_ == State::kAfterCalls) GiveBack(&out);
  return out;
}

void GenericParser::GiveBack(ParsedText* out) {
  if (!made_call_) EmitContent(out, opening_);
  opening_.clear();
  EmitContent(out, buffer_);
  buffer_.clear();
}

ParsedText GenericParser::Finish() {
  ParsedText out;
  if (state_ == State::kCalls && expect_call_) {
    // A call cut off after its name and arguments counts (EndCall).
    const size_t i = SkipSpace(buffer_, 0);
    if (i < buffer_.size() && buffer_[i] == '{' && EndCall(&out, std::string_view(buffer_).substr(i))) {
      made_call_ = true;
      buffer_.clear();
    }
  }
  DropCall();
  // The object's unclosed brackets after the calls are the syntax's.
  if (state_ == State::kCalls && made_call_ &&
      buffer_.find_first_not_of(" \n\t\r,]}") == std::string::npos)
    buffer_.clear();
  GiveBack(&out);
  FinishContent(&out, "");
  state_ = State::kUndecided;
  single_ = false;
  expect_call_ = true;
  closing_.clear();
  made_call_ = false;
  return out;
}

}  // namespace specline::tool_calls
