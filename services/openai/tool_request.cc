#include "services/openai/tool_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/openai/openai_request.h"
#include "services/tool_calls/generic_prompt.h"
#include "services/tool_calls/tool_call_schema.h"

namespace specline::openai {
namespace {

using nlohmann::json;

bool ValidFunctionName(const std::string& name) {
  // OpenAI's rule: a-z, A-Z, 0-9, underscores and dashes, at most 64.
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::optional<ApiError> ReadTool(const json& tool, const std::string& at, json* out) {
  if (!tool.is_object()) return BadField(at, "must be an object");
  if (tool.value("type", "") != "function")
    return BadField(at + ".type", "only \"function\" tools are supported");
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object()) return BadField(at + ".function", "must be an object");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || !ValidFunctionName(name->get<std::string>()))
    return BadField(at + ".function.name",
               "must be a string of a-z, A-Z, 0-9, underscores and dashes, at most 64");
  if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
    return BadField(at + ".function.description", "must be a string");
  if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
    // A JSON Schema: an object (OpenAI takes any schema object; its
    // content is the grammar's to read when a call is enforced).
    if (!p->is_object()) return BadField(at + ".function.parameters", "must be a JSON Schema object");
    if (auto t = p->find("type"); t != p->end() && *t != "object")
      return BadField(at + ".function.parameters.type", "must be \"object\" (arguments are an object)");
  }
  if (auto s = fn->find("strict"); s != fn->end() && !s->is_null() && !s->is_boolean())
    return BadField(at + ".function.strict", "must be true or false");
  *out = tool;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ReadTools(const json& body, ToolRequest* out, v1::ChatMessages* chat) {
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return BadField("tools", "must be a list of tools");
    for (size_t i = 0; i < it->size(); ++i) {
      json tool;
      if (auto e = ReadTool((*it)[i], absl::StrCat("tools[", i, "]"), &tool)) return e;
      for (const json& seen : out->tools) {
        if (seen["function"]["name"] == tool["function"]["name"])
          return BadField(absl::StrCat("tools[", i, "].function.name"),
                     absl::StrCat("'", tool["function"]["name"].get<std::string>(),
                                  "' is given twice"));
      }
      out->tools.push_back(std::move(tool));
    }
  }
  const bool has_tools = !out->tools.empty();
  out->choice = has_tools ? ToolRequest::Choice::kAuto : ToolRequest::Choice::kNone;
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    const json& c = *it;
    if (c == "none") {
      out->choice = ToolRequest::Choice::kNone;
    } else if (c == "auto") {
      out->choice = has_tools ? ToolRequest::Choice::kAuto : ToolRequest::Choice::kNone;
    } else if (c == "required") {
      out->choice = ToolRequest::Choice::kRequired;
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      out->choice = ToolRequest::Choice::kFunction;
      out->function = c["function"]["name"].get<std::string>();
      bool found = false;
      for (const json& tool : out->tools) found |= tool["function"]["name"] == out->function;
      if (!found)
        return BadField("tool_choice", absl::StrCat("function '", out->function, "' is not among the tools"));
    } else {
      return BadField("tool_choice",
                 "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                 "\"function\": {\"name\": ...}}");
    }
    if (out->choice == ToolRequest::Choice::kRequired && !has_tools)
      return BadField("tool_choice", "\"required\" needs tools");
  }
  if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return BadField("parallel_tool_calls", "must be true or false");
    out->parallel_tool_calls = it->get<bool>();
    out->parallel_tool_calls_given = true;
  }
  if (has_tools) chat->set_tools_json(out->tools.dump());
  return std::nullopt;
}

void KeepClientKeyOrder(std::string_view body_text, v1::ChatMessages* chat) {
  const bool has_calls = std::any_of(chat->messages().begin(), chat->messages().end(),
                                     [](const v1::ChatMessage& m) { return !m.tool_calls_json().empty(); });
  if (chat->tools_json().empty() && !has_calls) return;
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(body_text, nullptr, false);
  if (!chat->tools_json().empty()) chat->set_tools_json(body["tools"].dump());
  const auto& messages = body["messages"];
  for (int i = 0; i < chat->messages_size() && i < static_cast<int>(messages.size()); ++i) {
    if (!chat->messages(i).tool_calls_json().empty())
      chat->mutable_messages(i)->set_tool_calls_json(messages[i]["tool_calls"].dump());
  }
}

std::optional<ApiError> ReadMessageToolFields(const json& m, const std::string& at,
                                              v1::ChatMessage* out) {
  const std::string role = m.value("role", "");
  if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
    if (role != "assistant") return BadField(at + ".tool_calls", "only assistant messages carry tool calls");
    if (!it->is_array()) return BadField(at + ".tool_calls", "must be a list");
    for (size_t k = 0; k < it->size(); ++k) {
      const json& call = (*it)[k];
      const std::string at_call = absl::StrCat(at, ".tool_calls[", k, "]");
      if (!call.is_object()) return BadField(at_call, "must be an object");
      if (call.contains("type") && call["type"] != "function")
        return BadField(at_call + ".type", "must be \"function\"");
      if (call.contains("id") && !call["id"].is_string()) return BadField(at_call + ".id", "must be a string");
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
        return BadField(at_call + ".function", "must be an object with a name");
      // OpenAI sends arguments as a JSON string; an object is accepted too.
      if (auto a = fn->find("arguments");
          a != fn->end() && !a->is_null() && !a->is_string() && !a->is_object())
        return BadField(at_call + ".function.arguments", "must be a string of JSON");
    }
    out->set_tool_calls_json(it->dump());
  }
  if (auto it = m.find("tool_call_id"); it != m.end() && !it->is_null()) {
    if (!it->is_string()) return BadField(at + ".tool_call_id", "must be a string");
    out->set_tool_call_id(it->get<std::string>());
  }
  if (role == "tool" && out->tool_call_id().empty())
    return BadField(at + ".tool_call_id", "is required in a tool message");
  if (auto it = m.find("name"); it != m.end() && !it->is_null()) {
    if (!it->is_string()) return BadField(at + ".name", "must be a string");
    out->set_name(it->get<std::string>());
  }
  return std::nullopt;
}

namespace {

// "required" or a named function: the response format under which the
// answer can only be a call in `syntax`.
std::optional<ApiError> EnforceCall(const ToolRequest& tools, const tool_calls::ToolCallSupport& support,
                                    v1::GenerateRequest* request, bool one_call = false) {
  if (request->has_response_format())
    return BadField("response_format", "cannot be combined with tool_choice \"required\" or a named function");
  absl::StatusOr<v1::ResponseFormat> format = tool_calls::ForcedCallFormat(
      support, tools.tools, tools.choice == ToolRequest::Choice::kFunction ? tools.function : "",
      one_call);
  if (!format.ok()) return BadField("tool_choice", std::string(format.status().message()));
  *request->mutable_response_format() = *std::move(format);
  return std::nullopt;
}

// A template that does not render tools: the generic form (generic_prompt.h).
std::optional<ApiError> ApplyGenericTools(const ToolRequest& tools, const tool_calls::ToolCallSupport& support,
                                          v1::GenerateRequest* request, tool_calls::Syntax* parse_with) {
  const bool calls = tools.choice != ToolRequest::Choice::kNone;
  tool_calls::RewriteForGenericTools(calls ? &tools.tools : nullptr, support.template_takes_system,
                                     request->mutable_chat());
  if (!calls) return std::nullopt;
  *parse_with = tool_calls::Syntax::kGeneric;
  // One call per answer unless the client asks for parallel calls: as
  // llama-server takes a template without tools to support no parallel
  // calls, and a named function is one call (vLLM's). A small model let
  // free to list calls tends to repeat its call until max_tokens.
  const bool one_call = !tools.parallel_tool_calls_given || !tools.parallel_tool_calls ||
                        tools.choice == ToolRequest::Choice::kFunction;
  if (tools.choice != ToolRequest::Choice::kAuto) {
    tool_calls::ToolCallSupport generic = support;
    generic.syntax = tool_calls::Syntax::kGeneric;
    return EnforceCall(tools, generic, request, one_call);
  }
  // "auto": text or the reply of calls, by grammar, unless the client's own
  // response_format holds the answer, or the policy cannot take a grammar
  // (then the answer is parsed as the model writes it).
  const bool no_grammar = request->policy() == v1::DECODING_POLICY_PTP ||
                          request->policy() == v1::DECODING_POLICY_PIPO;
  if (request->has_response_format() || no_grammar) return std::nullopt;
  absl::StatusOr<v1::ResponseFormat> format = tool_calls::GenericAutoFormat(tools.tools, one_call);
  if (!format.ok()) return BadField("tools", std::string(format.status().message()));
  *request->mutable_response_format() = *std::move(format);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ApplyToolChoice(const ToolRequest& tools,
                                        const tool_calls::ToolCallSupport& support,
                                        v1::GenerateRequest* request,
                                        tool_calls::Syntax* parse_with) {
  *parse_with = tool_calls::Syntax::kNone;
  if (tools.tools.empty() || !request->has_chat()) return std::nullopt;
  if (!support.template_reads_tools) return ApplyGenericTools(tools, support, request, parse_with);
  if (tools.choice == ToolRequest::Choice::kNone) return std::nullopt;
  if (support.syntax == tool_calls::Syntax::kNone) {
    return BadField("tools",
               "the served model's tool-call syntax is not known (its chat template shows none "
               "the gateway parses); start the gateway with --tool-call-parser "
               "hermes|llama3|mistral");
  }
  *parse_with = support.syntax;
  if (tools.choice == ToolRequest::Choice::kAuto) return std::nullopt;
  return EnforceCall(tools, support, request);
}

}  // namespace specline::openai
