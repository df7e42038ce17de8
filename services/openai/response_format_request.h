// Structured output as the clients of the three APIs ask for it, turned
// into specline.v1.ResponseFormat (the grammar the scheduler enforces):
//   OpenAI        response_format {"type": "json_object"} or
//                 {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
//   vLLM          guided_json, guided_regex, guided_choice, guided_grammar,
//                 and the newer structured_outputs {json, regex, choice, grammar}
//   llama-server  json_schema (a schema object) and grammar (GBNF)
// At most one may be given; {"type": "text"} and nulls mean free text.
#pragma once

#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

// The request fields ReadResponseFormat reads (for the known-field check).
const std::set<std::string>& ResponseFormatFields();

// Sets out->response_format when the body asks for structured output; an
// ApiError naming the field when it is malformed or several are given.
// Whether a schema or a grammar compiles is the scheduler's check.
std::optional<ApiError> ReadResponseFormat(const nlohmann::json& body, v1::GenerateRequest* out);

}  // namespace specline::openai
