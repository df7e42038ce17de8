#include "services/tool_calls/mistral_parser.h"


namespace specline::tool_calls {

ParsedText MistralParser::Push(std::string_view text) {
  ParsedText out;
  buffer_ += text;
  while (true) {
    if (!after_marker_) {
      const size_t at = buffer_.find(kToolCalls);
      if (at == std::string::npos) {
        const size_t keep = PartialMarkerStart(buffer_, kToolCalls);
        EmitContent(&out, std::string_view(buffer_).substr(0, keep));
        buffer_.erase(0, keep);
        return out;
      }
      EmitContent(&out, std::string_view(buffer_).substr(0, at));
      buffer_.erase(0, at + kToolCalls.size());
      after_marker_ = true;
    }
    if (!TakeCalls(&out)) return out;
    after_marker_ = false;
  }
}

bool MistralParser::TakeCalls(ParsedText* out) {
  const size_t start = buffer_.find_first_not_of(" \n\t\r");
  if (start == std::string::npos) return false;
  if (buffer_[start] == '[') {
    // [{"name": ..., "arguments": ...}, ...]
    const std::optional<size_t> end = JsonValueEnd(buffer_, start);
    if (!end) return false;
    const std::string_view list = std::string_view(buffer_).substr(start, *end - start);
    nlohmann::json calls = nlohmann::json::parse(list, nullptr, /*allow_exceptions=*/false);
    std::vector<ToolCall> parsed;
    if (calls.is_array() && !calls.empty()) {
      for (const auto& call : calls) {
        std::optional<ToolCall> c = CallFromJson(call, syntax_);
        if (!c) break;
        parsed.push_back(*std::move(c));
      }
    }
    if (parsed.size() == calls.size() && !parsed.empty()) {
      for (ToolCall& c : parsed) EmitCall(out, std::move(c));
    } else {
      EmitContent(out, std::string(kToolCalls) + buffer_.substr(0, *end));
    }
    buffer_.erase(0, *end);
    return true;
  }
  // name[ARGS]{...}
  const size_t args = buffer_.find(kArgs);
  if (args == std::string::npos) return false;
  const size_t open = buffer_.find_first_not_of(" \n\t\r", args + kArgs.size());
  if (open == std::string::npos) return false;
  std::optional<size_t> end;
  if (buffer_[open] == '{') {
    end = JsonValueEnd(buffer_, open);
    if (!end) return false;
  }
  std::optional<ToolCall> c;
  if (end) {
    std::string name = buffer_.substr(start, args - start);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\n')) name.pop_back();
    c = CallFromParts(std::move(name), std::string_view(buffer_).substr(open, *end - open), syntax_);
  }
  const size_t used = end ? *end : open + 1;
  if (c) EmitCall(out, *std::move(c));
  else EmitContent(out, std::string(kToolCalls) + buffer_.substr(0, used));
  buffer_.erase(0, used);
  return true;
}

ParsedText MistralParser::Finish() {
  ParsedText out;
  // Calls cut off by the end of generation are text.
  FinishContent(&out, after_marker_ ? std::string(kToolCalls) + buffer_ : buffer_);
  buffer_.clear();
  after_marker_ = false;
  return out;
}

}  // namespace specline::tool_calls
