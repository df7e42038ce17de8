#include "services/tool_calls/tool_call_parser.h"

#include <random>

#include "services/tool_calls/generic_parser.h"
#include "services/tool_calls/hermes_parser.h"
#include "services/tool_calls/llama3_parser.h"
#include "services/tool_calls/mistral_parser.h"
#include "services/tool_calls/parser_base.h"

namespace specline::tool_calls {
namespace {

// kNone: the text is the answer.
class PlainTextParser final : public ToolCallParser {
 public:
  ParsedText Push(std::string_view text) override { return {std::string(text), {}, {}}; }
  ParsedText Finish() override { return {}; }
};

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

void ParsedText::Append(ParsedText more) {
  content += more.content;
  for (ToolCall& c : more.calls) calls.push_back(std::move(c));
  for (CallDelta& d : more.deltas) deltas.push_back(std::move(d));
}

std::unique_ptr<ToolCallParser> MakeParser(Syntax syntax) {
  switch (syntax) {
    case Syntax::kHermes: return std::make_unique<HermesParser>();
    case Syntax::kLlama3: return std::make_unique<Llama3Parser>();
    case Syntax::kMistral: return std::make_unique<MistralParser>();
    case Syntax::kGeneric: return std::make_unique<GenericParser>();
    case Syntax::kNone: break;
  }
  return std::make_unique<PlainTextParser>();
}

ParsedText ParseAll(Syntax syntax, std::string_view text) {
  auto parser = MakeParser(syntax);
  ParsedText out = parser->Push(text);
  out.Append(parser->Finish());
  return out;
}

size_t PartialMarkerStart(std::string_view text, std::string_view marker) {
  const size_t longest = std::min(text.size(), marker.size() - 1);
  for (size_t n = longest; n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return text.size() - n;
  }
  return text.size();
}

std::optional<size_t> JsonValueEnd(std::string_view s, size_t start) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::nullopt;
}

std::string NewCallId(Syntax syntax) {
  static constexpr char kAlnum[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  // Mistral's templates refuse ids that are not 9 characters long.
  const bool mistral = syntax == Syntax::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

std::optional<ToolCall> CallFromParts(std::string name, std::string_view arguments,
                                      Syntax syntax) {
  if (name.empty()) return std::nullopt;
  nlohmann::json args = nlohmann::json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (args.is_string())
    args = nlohmann::json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (!args.is_object()) return std::nullopt;
  return ToolCall{NewCallId(syntax), std::move(name),
                  args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

std::optional<ToolCall> CallFromJson(const nlohmann::json& call, Syntax syntax) {
  if (!call.is_object()) return std::nullopt;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string()) return std::nullopt;
  auto args = call.find("arguments");
  if (args == call.end()) args = call.find("parameters");
  const std::string args_text = args == call.end() ? "{}" : args->dump();
  return CallFromParts(name->get<std::string>(), args_text, syntax);
}

void ParserBase::EmitContent(ParsedText* out, std::string_view text) {
  if (!calls_seen_) {
    out->content += text;
    return;
  }
  held_space_ += text;
  for (char c : held_space_) {
    if (!IsSpace(c)) {
      out->content += held_space_;
      held_space_.clear();
      return;
    }
  }
}

void ParserBase::EmitCall(ParsedText* out, ToolCall call) {
  calls_seen_ = true;
  held_space_.clear();
  out->calls.push_back(std::move(call));
}

void ParserBase::FinishContent(ParsedText* out, std::string_view rest) {
  EmitContent(out, rest);
  held_space_.clear();
}

}  // namespace specline::tool_calls
