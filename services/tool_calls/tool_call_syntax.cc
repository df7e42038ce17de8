#include "services/tool_calls/tool_call_syntax.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/tokenizer.h"

namespace specline::tool_calls {

const char* SyntaxName(Syntax syntax) {
  switch (syntax) {
    case Syntax::kHermes: return "hermes";
    case Syntax::kLlama3: return "llama3";
    case Syntax::kMistral: return "mistral";
    case Syntax::kGeneric: return "generic";
    case Syntax::kNone: break;
  }
  return "none";
}

std::optional<Syntax> SyntaxFromFlag(std::string_view name, bool* is_auto, std::string* error) {
  *is_auto = name == "auto";
  if (*is_auto) return std::nullopt;
  for (Syntax s : {Syntax::kNone, Syntax::kHermes, Syntax::kLlama3, Syntax::kMistral}) {
    if (name == SyntaxName(s)) return s;
  }
  *error = absl::StrCat("--tool-call-parser: unknown value '", std::string(name),
                        "' (auto, hermes, llama3, mistral, none)");
  return std::nullopt;
}

Syntax SyntaxFromTemplate(std::string_view source) {
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (!TemplateReadsTools(source)) return Syntax::kNone;
  // The wrappers the templates write around an assistant's past calls (and
  // describe in their system prompts): the syntax the model was taught.
  if (has("<tool_call>")) {
    // Qwen3-Coder, Qwen3.5, Nemotron 3 and GLM 4.6 wrap XML, not JSON, in
    // the same tags (<function=name><parameter=...>, <arg_key>): no parser
    // here reads those.
    if (has("<function=") || has("<parameter=") || has("<arg_key>")) return Syntax::kNone;
    return Syntax::kHermes;
  }
  if (has("[TOOL_CALLS]")) return Syntax::kMistral;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\"")))
    return Syntax::kLlama3;
  return Syntax::kNone;
}

bool TemplateReadsTools(std::string_view source) {
  // A template that renders tools names the variable; one that does not
  // never mentions it (SmolLM2, Llama 2, Phi-3.5).
  for (size_t at = source.find("tools"); at != std::string_view::npos;
       at = source.find("tools", at + 1)) {
    const char before = at == 0 ? ' ' : source[at - 1];
    const char after = at + 5 < source.size() ? source[at + 5] : ' ';
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    if (!ident(before) && !ident(after)) return true;
  }
  return false;
}

namespace {

// Renders a system turn and a user turn: whether the system text comes out.
bool TakesSystem(const ChatTemplate& chat_template) {
  constexpr char kProbe[] = "system-probe-7f3a";
  const nlohmann::ordered_json messages = {{{"role", "system"}, {"content", kProbe}},
                                           {{"role", "user"}, {"content", "Hi"}}};
  ChatRenderOptions options;
  absl::StatusOr<std::string> text = chat_template.Apply(messages, options);
  return text.ok() && text->find(kProbe) != std::string::npos;
}

}  // namespace

ToolCallSupport ResolveToolCallSupport(std::string_view flag, const ChatTemplate* chat_template,
                                       const Tokenizer* tokenizer) {
  ToolCallSupport out;
  const std::string source = chat_template ? chat_template->tools_source() : std::string();
  out.template_reads_tools = TemplateReadsTools(source);
  out.mistral_args_form = source.find("[ARGS]") != std::string::npos;
  if (chat_template) out.template_origin = chat_template->origin();
  bool is_auto = false;
  std::string error;
  std::optional<Syntax> named = SyntaxFromFlag(flag, &is_auto, &error);
  if (!is_auto && !named) throw std::invalid_argument(error);
  out.syntax = is_auto ? SyntaxFromTemplate(source) : *named;
  if (chat_template && !out.template_reads_tools) out.template_takes_system = TakesSystem(*chat_template);
  if (!tokenizer) return out;
  // Markers that are single control tokens print as nothing; the parser
  // needs to see them.
  for (const char* marker : {"[TOOL_CALLS]", "[ARGS]", "<|python_tag|>"}) {
    const std::vector<int32_t> ids = tokenizer->Encode(marker, false, /*parse_special=*/true);
    if (ids.size() == 1 && tokenizer->TokenBytes(-1, ids[0]).empty())
      out.markers.push_back({ids[0], marker});
  }
  return out;
}

std::string MarkedText(const std::vector<MarkerToken>& markers, const Tokenizer* tokenizer,
                       const int32_t* token_ids, int n_tokens, const std::string& text) {
  if (markers.empty() || !tokenizer) return text;
  std::string out;
  size_t taken = 0;   // bytes of `text` copied to `out`
  size_t offset = 0;  // where the current token starts in `text`
  for (int i = 0; i < n_tokens; ++i) {
    auto m = std::find_if(markers.begin(), markers.end(),
                          [&](const MarkerToken& mk) { return mk.id == token_ids[i]; });
    if (m == markers.end()) {
      offset += tokenizer->TokenBytes(-1, token_ids[i]).size();
      continue;
    }
    // The detokenizer may hold a split character back across messages, so
    // the offset is clamped to the text this message carries.
    const size_t at = std::min(std::max(offset, taken), text.size());
    out.append(text, taken, at - taken);
    out += m->text;
    taken = at;
  }
  out.append(text, taken, std::string::npos);
  return out;
}

}  // namespace specline::tool_calls
