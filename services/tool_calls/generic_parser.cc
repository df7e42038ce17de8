#include "services/tool_calls/generic_parser.h"

namespace specline::tool_calls {

std::vector<ToolCall> GenericParser::CallsOf(const nlohmann::json& object) const {
  std::vector<ToolCall> calls;
  if (!object.is_object() || object.size() != 1) return calls;
  if (auto one = object.find("tool_call"); one != object.end()) {
    if (std::optional<ToolCall> c = CallFromJson(*one, syntax_)) calls.push_back(*std::move(c));
    return calls;
  }
  auto list = object.find("tool_calls");
  if (list == object.end() || !list->is_array()) return calls;
  for (const nlohmann::json& entry : *list) {
    std::optional<ToolCall> c = CallFromJson(entry, syntax_);
    // One malformed entry makes the whole object text: half a reply of
    // calls is not what the model meant.
    if (!c) return {};
    calls.push_back(*std::move(c));
  }
  return calls;
}

ParsedText GenericParser::Push(std::string_view text) {
  ParsedText out;
  buffer_ += text;
  if (state_ == State::kUndecided) {
    const size_t first = buffer_.find_first_not_of(" \n\t\r");
    if (first == std::string::npos) return out;  // only whitespace so far
    state_ = buffer_[first] == '{' ? State::kObject : State::kText;
  }
  if (state_ == State::kObject) {
    const size_t start = buffer_.find('{');
    const std::optional<size_t> end = JsonValueEnd(buffer_, start);
    if (!end) return out;  // the object is not closed yet
    const nlohmann::json object = nlohmann::json::parse(
        std::string_view(buffer_).substr(start, *end - start), nullptr, /*allow_exceptions=*/false);
    std::vector<ToolCall> calls = CallsOf(object);
    if (calls.empty()) {
      state_ = State::kText;
    } else {
      for (ToolCall& c : calls) EmitCall(&out, std::move(c));
      buffer_.erase(0, *end);
      state_ = State::kAfterCalls;
    }
  }
  GiveBack(&out);
  return out;
}

void GenericParser::GiveBack(ParsedText* out) {
  EmitContent(out, buffer_);
  buffer_.clear();
}

ParsedText GenericParser::Finish() {
  ParsedText out;
  // Whitespace alone, or an object the generation cut off: text.
  FinishContent(&out, buffer_);
  buffer_.clear();
  state_ = State::kUndecided;
  return out;
}

}  // namespace specline::tool_calls
