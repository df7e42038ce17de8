// tool_choice "required" or a named function, enforced: the response
// format (services' structured output) under which the model's text can
// only be one well-formed call, in its family's syntax, whose arguments
// keep to the function's parameters schema.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "services/tool_calls/tool_call_syntax.h"
#include "specline/v1/generation.pb.h"

namespace specline::tool_calls {

// `tools`: OpenAI's validated tools list ({"type": "function", "function":
// {"name", "parameters"?}}). `function`: the named function, "" for any of
// them ("required"). InvalidArgument when the function is not among the
// tools or the syntax cannot be enforced (kNone; Mistral's name[ARGS] form
// with a choice between several functions, which is not one JSON value).
// `one_call`: the generic form (Syntax::kGeneric) allows one call only,
// not a list of them (the other syntaxes' grammars allow one call always).
absl::StatusOr<v1::ResponseFormat> ForcedCallFormat(const ToolCallSupport& support,
                                                    const nlohmann::json& tools,
                                                    std::string_view function,
                                                    bool one_call = false);

// tool_choice "auto" in the generic form (generic_prompt.h): the answer is
// plain text (not opening with "{") or the reply of calls, as one EBNF
// grammar; the model chooses. InvalidArgument when a tool's parameters
// schema cannot be compiled. `one_call` as for ForcedCallFormat.
absl::StatusOr<v1::ResponseFormat> GenericAutoFormat(const nlohmann::json& tools, bool one_call);

}  // namespace specline::tool_calls
