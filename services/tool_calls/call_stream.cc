// ParserBase's calls: read with a CallReader, announced and streamed as
// they arrive when the parser was asked to stream them.
#include <nlohmann/json.hpp>

#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {
namespace {

using nlohmann::json;

// The arguments of a whole call's text as the model wrote them; nullopt
// when the text is not a call: {"name": "<non-empty>", "arguments": {...}}
// (or the arguments alone), arguments absent meaning {}, and arguments
// written as a JSON string holding an object taken as that string. A call
// cut off after its name and arguments (the object not closed, nothing
// stray) counts: all a client needs of it was written, and streamed it went
// out whole.
std::optional<std::string> WholeArguments(const CallReader& reader, std::string_view text) {
  const json whole = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool cut_off = whole.is_discarded() && !reader.broken() && !reader.closed();
  if (!(whole.is_object() || cut_off) || !reader.has_name() || reader.name().empty()) return std::nullopt;
  if (reader.arguments_begin() == CallReader::npos) {
    if (cut_off) return std::nullopt;
    return std::string("{}");
  }
  if (reader.arguments_end() == CallReader::npos) return std::nullopt;
  const std::string_view raw =
      text.substr(reader.arguments_begin(), reader.arguments_end() - reader.arguments_begin());
  const json args = json::parse(raw, nullptr, false);
  if (args.is_object()) return std::string(raw);
  if (!args.is_string()) return std::nullopt;
  std::string inner = args.get<std::string>();
  if (!json::parse(inner, nullptr, false).is_object()) return std::nullopt;
  return inner;
}

}  // namespace

std::optional<ToolCall> ParserBase::WholeCall(std::string_view text, CallReader reader) const {
  reader.Advance(text);
  std::optional<std::string> args = WholeArguments(reader, text);
  if (!args) return std::nullopt;
  return ToolCall{NewCallId(syntax_), reader.name(), *std::move(args)};
}

void ParserBase::StartCall(CallReader reader) {
  if (call_) return;
  call_.emplace(std::move(reader));
}

void ParserBase::Announce(ParsedText* out, OpenCall& call) {
  if (call.announced) return;
  call.announced = true;
  call.index = calls_announced_++;
  call.id = NewCallId(syntax_);
  if (stream_) out->deltas.push_back({call.index, call.id, call.reader.name(), "", false});
}

void ParserBase::SendArguments(ParsedText* out, OpenCall& call, std::string_view piece) {
  if (piece.empty()) return;
  call.sent += piece;
  if (!stream_) return;
  // One delta per call and piece of text, however many bytes it brought.
  if (!out->deltas.empty() && out->deltas.back().index == call.index && !out->deltas.back().done &&
      out->deltas.back().id.empty()) {
    out->deltas.back().arguments += piece;
    return;
  }
  out->deltas.push_back({call.index, "", "", std::string(piece), false});
}

void ParserBase::ReadCall(ParsedText* out, std::string_view text) {
  if (!stream_) return;
  StartCall();
  OpenCall& call = *call_;
  call.reader.Advance(text);
  const size_t begin = call.reader.arguments_begin();
  // Streamed from when the name is known and the arguments are an object;
  // arguments written as a string go out whole at the end.
  if (!call.announced) {
    if (!call.reader.has_name() || begin == CallReader::npos || text[begin] != '{') return;
    Announce(out, call);
  }
  const size_t end = call.reader.arguments_end() != CallReader::npos ? call.reader.arguments_end()
                                                                      : call.reader.scanned();
  const size_t from = begin + call.sent.size();
  if (end > from) SendArguments(out, call, text.substr(from, end - from));
}

bool ParserBase::EndCall(ParsedText* out, std::string_view text, CallReader reader) {
  StartCall(std::move(reader));
  ReadCall(out, text);
  OpenCall& call = *call_;
  call.reader.Advance(text);
  const std::optional<std::string> args = WholeArguments(call.reader, text);
  if (!args) {
    // Not a call. One that already went out ends with the arguments sent
    // so far (a client holds its id), and its text is given back as well,
    // as the non-streamed answer gives it.
    if (call.announced) {
      out->deltas.push_back({call.index, "", "", "", true});
      out->calls.push_back({call.id, call.reader.has_name() ? call.reader.name() : "", call.sent});
    }
    call_.reset();
    return false;
  }
  Announce(out, call);
  if (args->compare(0, call.sent.size(), call.sent) == 0)
    SendArguments(out, call, std::string_view(*args).substr(call.sent.size()));
  if (stream_) out->deltas.push_back({call.index, "", "", "", true});
  ToolCall done{call.id, call.reader.name(), call.sent};
  call_.reset();
  EmitCall(out, std::move(done));
  return true;
}

}  // namespace specline::tool_calls
