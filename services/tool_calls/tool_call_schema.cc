#include "services/tool_calls/tool_call_schema.h"

#include "absl/strings/str_cat.h"
#include "model/grammar/response_format_grammar.h"

namespace specline::tool_calls {
namespace {

using nlohmann::json;

json Parameters(const json& tool) {
  const json& fn = tool["function"];
  auto it = fn.find("parameters");
  // OpenAI: omitted parameters means a function without arguments.
  if (it == fn.end() || it->is_null()) return {{"type", "object"}, {"properties", json::object()}};
  return *it;
}

// {"name": <const>, key: <parameters>}: the JSON a call is in this syntax.
// Ordered: the grammar writes properties in the schema's order, and the
// name first lets the arguments stream as they are generated.
nlohmann::ordered_json CallSchema(const json& tool, const char* arguments_key) {
  const std::string name = tool["function"]["name"].get<std::string>();
  return {{"type", "object"},
          {"properties", {{"name", {{"const", name}}}, {arguments_key, Parameters(tool)}}},
          {"required", {"name", arguments_key}},
          {"additionalProperties", false}};
}

// The generic form's reply of calls (generic_prompt.h): {"tool_calls":
// [calls to the `chosen` tools, one or more; one only with `one_call`]}.
// Ordered: the grammar writes properties in the schema's order, and a
// call's name comes before its arguments (as the prompt shows it).
nlohmann::ordered_json GenericCallsSchema(const std::vector<const json*>& chosen, bool one_call) {
  using ordered = nlohmann::ordered_json;
  ordered any = ordered::array();
  for (const json* tool : chosen) {
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", (*tool)["function"]["name"]}}},
                                   {"arguments", Parameters(*tool)}}},
                   {"required", {"name", "arguments"}},
                   {"additionalProperties", false}});
  }
  ordered calls = {{"type", "array"},
                   {"items", any.size() == 1 ? any[0] : ordered{{"anyOf", any}}},
                   {"minItems", 1}};
  if (one_call) calls["maxItems"] = 1;
  return {{"type", "object"},
          {"properties", {{"tool_calls", calls}}},
          {"required", {"tool_calls"}},
          {"additionalProperties", false}};
}

}  // namespace

absl::StatusOr<v1::ResponseFormat> GenericAutoFormat(const json& tools, bool one_call) {
  std::vector<const json*> all;
  for (const json& tool : tools) all.push_back(&tool);
  if (all.empty()) return absl::InvalidArgumentError("tools is empty");
  absl::StatusOr<std::string> ebnf =
      grammar::TextOrJsonSchemaEbnf(GenericCallsSchema(all, one_call).dump());
  if (!ebnf.ok()) return ebnf.status();
  v1::ResponseFormat format;
  format.set_ebnf(*std::move(ebnf));
  return format;
}

absl::StatusOr<v1::ResponseFormat> ForcedCallFormat(const ToolCallSupport& support,
                                                    const json& tools,
                                                    std::string_view function, bool one_call) {
  std::vector<const json*> chosen;
  for (const json& tool : tools) {
    if (function.empty() || tool["function"]["name"].get<std::string>() == function)
      chosen.push_back(&tool);
  }
  if (chosen.empty()) {
    return absl::InvalidArgumentError(
        function.empty() ? std::string("tools is empty")
                         : absl::StrCat("function '", std::string(function), "' is not among the tools"));
  }
  v1::ResponseFormat format;
  nlohmann::ordered_json schema;
  switch (support.syntax) {
    case Syntax::kHermes:
    case Syntax::kLlama3: {
      // Llama 3.1's template asks for "parameters"; Hermes and Qwen for "arguments".
      const char* key = support.syntax == Syntax::kLlama3 ? "parameters" : "arguments";
      nlohmann::ordered_json any = nlohmann::ordered_json::array();
      for (const json* tool : chosen) any.push_back(CallSchema(*tool, key));
      schema = any.size() == 1 ? any[0] : nlohmann::ordered_json{{"anyOf", any}};
      if (support.syntax == Syntax::kHermes) {
        format.set_prefix("<tool_call>\n");
        format.set_suffix("\n</tool_call>");
      }
      break;
    }
    case Syntax::kMistral:
      if (support.mistral_args_form) {
        // [TOOL_CALLS]name[ARGS]{...}: the name is literal text, outside the JSON.
        if (chosen.size() != 1) {
          return absl::InvalidArgumentError(
              "this model's call syntax (name[ARGS]{...}) is enforced for one named function "
              "only; name it in tool_choice");
        }
        schema = Parameters(*chosen[0]);
        format.set_prefix(absl::StrCat("[TOOL_CALLS]", (*chosen[0])["function"]["name"].get<std::string>(),
                                       "[ARGS]"));
      } else {
        nlohmann::ordered_json any = nlohmann::ordered_json::array();
        for (const json* tool : chosen) any.push_back(CallSchema(*tool, "arguments"));
        schema = {{"type", "array"},
                  {"items", any.size() == 1 ? any[0] : nlohmann::ordered_json{{"anyOf", any}}},
                  {"minItems", 1}};
        format.set_prefix("[TOOL_CALLS]");
      }
      break;
    case Syntax::kGeneric:
      format.set_json_schema(GenericCallsSchema(chosen, one_call).dump());
      return format;
    case Syntax::kNone:
      return absl::InvalidArgumentError(
          "the served model's tool-call syntax is not known, so a call cannot be enforced; start "
          "the gateway with --tool-call-parser");
  }
  format.set_json_schema(schema.dump());
  return format;
}

}  // namespace specline::tool_calls
