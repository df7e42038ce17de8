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
absl::StatusOr<v1::ResponseFormat> ForcedCallFormat(const ToolCallSupport& support,
                                                    const nlohmann::json& tools,
                                                    std::string_view function);

}  // namespace specline::tool_calls
