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
  return buffer_[start] == '[' ? TakeList(out, start) : TakeArgsForm(out, start);
}

namespace {

// The elements of a JSON list's text, each an object; nullopt when one is
// not an object or the list is not one.
std::optional<std::vector<std::string_view>> ObjectElements(std::string_view list) {
  std::vector<std::string_view> out;
  size_t i = 1;
  while (true) {
    i = list.find_first_not_of(" \n\t\r", i);
    if (i == std::string_view::npos) return std::nullopt;
    if (list[i] == ']' && out.empty()) return out;
    if (list[i] != '{') return std::nullopt;
    const std::optional<size_t> end = JsonValueEnd(list, i);
    if (!end) return std::nullopt;
    out.push_back(list.substr(i, *end - i));
    i = list.find_first_not_of(" \n\t\r", *end);
    if (i == std::string_view::npos) return std::nullopt;
    if (list[i] == ']') return out;
    if (list[i] != ',') return std::nullopt;
    ++i;
  }
}

}  // namespace

// [{"name": ..., "arguments": ...}, ...]
bool MistralParser::TakeList(ParsedText* out, size_t start) {
  const std::optional<size_t> end = JsonValueEnd(buffer_, start);
  if (stream_) StreamList(out, start);
  if (!end) return false;
  const std::string_view list = std::string_view(buffer_).substr(start, *end - start);
  // Every element a call, or the whole list is text (streamed, the calls
  // that went out stay calls as well).
  std::vector<ToolCall> calls;
  if (auto elements = ObjectElements(list)) {
    for (std::string_view e : *elements) {
      std::optional<ToolCall> c = WholeCall(e);
      if (!c) break;
      calls.push_back(*std::move(c));
    }
    if (calls.size() != elements->size()) calls.clear();
  }
  if (calls.empty()) EmitContent(out, std::string(kToolCalls) + buffer_.substr(0, *end));
  if (!stream_) {
    for (ToolCall& c : calls) EmitCall(out, std::move(c));
  }
  DropCall();
  list_next_ = 0;
  buffer_.erase(0, *end);
  return true;
}

// Streamed: each element of the list as a call of its own, as it arrives.
void MistralParser::StreamList(ParsedText* out, size_t start) {
  if (list_next_ == 0) list_next_ = start + 1;
  while (true) {
    if (!CallOpen()) {
      const size_t at = buffer_.find_first_not_of(" \n\t\r,", list_next_);
      // More to come, the list's end, or an element that is no call.
      if (at == std::string::npos || buffer_[at] != '{') return;
      list_element_ = at;
      StartCall();
    }
    const std::string_view element = std::string_view(buffer_).substr(list_element_);
    const std::optional<size_t> end = JsonValueEnd(element, 0);
    if (!end) return ReadCall(out, element);
    EndCall(out, element.substr(0, *end));
    list_next_ = list_element_ + *end;
  }
}

// name[ARGS]{...}
bool MistralParser::TakeArgsForm(ParsedText* out, size_t start) {
  const size_t args = buffer_.find(kArgs);
  if (args == std::string::npos) return false;
  std::string name = buffer_.substr(start, args - start);
  while (!name.empty() && (name.back() == ' ' || name.back() == '\n')) name.pop_back();
  const size_t value = args + kArgs.size();
  const std::string_view text = std::string_view(buffer_).substr(value);
  const size_t open = text.find_first_not_of(" \n\t\r");
  if (open == std::string::npos) return false;
  size_t used = open + 1;
  if (text[open] == '{') {
    const std::optional<size_t> end = JsonValueEnd(text, open);
    if (!end) {
      StartCall(CallReader(name));
      ReadCall(out, text);
      return false;
    }
    used = *end;
  }
  if (!EndCall(out, text.substr(0, used), CallReader(name)))
    EmitContent(out, std::string(kToolCalls) + buffer_.substr(0, value + used));
  buffer_.erase(0, value + used);
  return true;
}

ParsedText MistralParser::Finish() {
  ParsedText out;
  // Calls cut off by the end of generation are text; one that was
  // streamed ends as a call too (EndCall).
  if (CallAnnounced()) {
    const size_t from = list_next_ > 0 ? list_element_ : buffer_.find(kArgs) + kArgs.size();
    EndCall(&out, std::string_view(buffer_).substr(from));
  }
  DropCall();
  FinishContent(&out, after_marker_ ? std::string(kToolCalls) + buffer_ : buffer_);
  buffer_.clear();
  after_marker_ = false;
  list_next_ = 0;
  return out;
}

}  // namespace specline::tool_calls
