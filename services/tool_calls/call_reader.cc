#include "services/tool_calls/call_reader.h"

#include <nlohmann/json.hpp>

namespace specline::tool_calls {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

CallReader::CallReader(std::string name) : arguments_only_(true), name_(std::move(name)) {
  state_ = State::kValue;
  field_ = Field::kArguments;
}

void CallReader::Advance(std::string_view text) {
  while (pos_ < text.size() && state_ != State::kClosed && state_ != State::kBroken) {
    if (Step(text, pos_)) ++pos_;
  }
}

bool CallReader::Step(std::string_view text, size_t i) {
  const char c = text[i];
  switch (state_) {
    case State::kBeforeObject:
      if (c == '{') state_ = State::kKey;
      else if (!IsSpace(c)) state_ = State::kBroken;
      return true;
    case State::kKey:
      if (c == '"') {
        key_.clear();
        escaped_ = false;
        state_ = State::kInKey;
      } else if (c == '}') {
        end_ = i + 1;
        state_ = State::kClosed;
      } else if (!IsSpace(c)) {
        state_ = State::kBroken;
      }
      return true;
    case State::kInKey:
      if (!escaped_ && c == '"') {
        state_ = State::kColon;
        return true;
      }
      escaped_ = !escaped_ && c == '\\';
      key_ += c;
      return true;
    case State::kColon:
      if (c == ':') {
        state_ = State::kValue;
        const bool args = (key_ == "arguments" || key_ == "parameters") && args_begin_ == npos;
        field_ = key_ == "name" && !name_ ? Field::kName : args ? Field::kArguments : Field::kOther;
      } else if (!IsSpace(c)) {
        state_ = State::kBroken;
      }
      return true;
    case State::kValue:
      if (IsSpace(c)) return true;
      BeginValue(i, c);
      return StepValue(text, i, c);
    case State::kInValue:
      return StepValue(text, i, c);
    case State::kAfterValue:
      if (c == ',') state_ = State::kKey;
      else if (c == '}') end_ = i + 1, state_ = State::kClosed;
      else if (!IsSpace(c)) state_ = State::kBroken;
      return true;
    case State::kClosed:
    case State::kBroken:
      break;
  }
  return true;
}

void CallReader::BeginValue(size_t i, char c) {
  state_ = State::kInValue;
  value_begin_ = i;
  depth_ = 0;
  in_string_ = false;
  escaped_ = false;
  bare_ = c != '"' && c != '{' && c != '[';
  if (field_ == Field::kArguments) args_begin_ = i;
}

// Strings and brackets as JsonValueEnd reads them; a bare value (a number,
// true, ...) ends at the delimiter after it, which is read again.
bool CallReader::StepValue(std::string_view text, size_t i, char c) {
  if (in_string_) {
    if (escaped_) escaped_ = false;
    else if (c == '\\') escaped_ = true;
    else if (c == '"') {
      in_string_ = false;
      if (depth_ == 0) EndValue(text, i + 1);
    }
    return true;
  }
  if (bare_) {
    if (c == ',' || c == '}' || c == ']' || IsSpace(c)) {
      EndValue(text, i);
      return false;
    }
    return true;
  }
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    if (--depth_ == 0) EndValue(text, i + 1);
  }
  return true;
}

void CallReader::EndValue(std::string_view text, size_t end) {
  if (field_ == Field::kName) {
    const nlohmann::json name =
        nlohmann::json::parse(text.substr(value_begin_, end - value_begin_), nullptr, false);
    if (name.is_string()) name_ = name.get<std::string>();
  } else if (field_ == Field::kArguments) {
    args_end_ = end;
  }
  if (arguments_only_) {
    end_ = end;
    state_ = State::kClosed;
    return;
  }
  state_ = State::kAfterValue;
}

}  // namespace specline::tool_calls
