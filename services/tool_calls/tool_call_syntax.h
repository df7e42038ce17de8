// Which tool-call syntax a served model writes, and the control tokens
// that mark its calls. Chosen from the chat template's text at start-up
// (the template is what teaches the model the syntax), or named by the
// operator with --tool-call-parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specline {
class ChatTemplate;
class Tokenizer;
}  // namespace specline

namespace specline::tool_calls {

enum class Syntax {
  kNone,     // no calls are parsed
  kHermes,   // Hermes 2/3, Qwen2.5, Qwen3: <tool_call>\n{"name", "arguments"}\n</tool_call>
  kLlama3,   // Llama 3.1-3.3: [<|python_tag|>]{"name", "parameters"}
  kMistral,  // [TOOL_CALLS][{"name", "arguments"}], or [TOOL_CALLS]name[ARGS]{...}
  // A template that does not render tools: the gateway writes them into
  // the prompt itself and the answer is {"tool_calls": [...]} or text
  // (generic_prompt.h). Chosen per request, never by the flag.
  kGeneric,
};

const char* SyntaxName(Syntax syntax);
// --tool-call-parser's values: hermes, llama3, mistral, none; "auto" gives
// nullopt (pick from the template). InvalidArgument-style message in *error.
std::optional<Syntax> SyntaxFromFlag(std::string_view name, bool* is_auto, std::string* error);
// The syntax a chat template's source teaches (kNone when it shows none).
Syntax SyntaxFromTemplate(std::string_view template_source);
// Whether the template renders the request's `tools` at all.
bool TemplateReadsTools(std::string_view template_source);

// A marker the model writes as one control token, which the detokenizer
// prints as nothing (Mistral's [TOOL_CALLS], Llama's <|python_tag|>): the
// gateway puts its text back before parsing (MarkedText).
struct MarkerToken {
  int32_t id;
  std::string text;
};

// What the gateway knows about the served model's tool calls.
struct ToolCallSupport {
  Syntax syntax = Syntax::kNone;
  bool template_reads_tools = false;
  // Mistral's newer syntax (name[ARGS]{...}) rather than the JSON list.
  bool mistral_args_form = false;
  std::string template_origin;  // where the chat template came from (ChatTemplate::origin)
  std::vector<MarkerToken> markers;
  // Whether the template renders a system message (Gemma's and Mistral's
  // raise on one): where the generic tool form writes its instructions.
  bool template_takes_system = true;
};

// Resolves the syntax (`flag`: "auto" or a name) and looks up the marker
// tokens in the tokenizer. Throws std::invalid_argument on a bad flag.
ToolCallSupport ResolveToolCallSupport(std::string_view flag, const ChatTemplate* chat_template,
                                       const Tokenizer* tokenizer);

// The text of `token_ids` as the parser must see it: `text` (what the
// detokenizer made of them) with each marker token's text put back where
// the token stood.
std::string MarkedText(const std::vector<MarkerToken>& markers, const Tokenizer* tokenizer,
                       const int32_t* token_ids, int n_tokens, const std::string& text);

}  // namespace specline::tool_calls
