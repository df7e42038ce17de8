// Errors in Anthropic's shape: {"type": "error", "error": {"type",
// "message"}}, the type named by the HTTP status as Anthropic names it
// (400 invalid_request_error, 401 authentication_error, 404 not_found_error,
// 429 rate_limit_error, 503 overloaded_error, ...). The Messages routes set
// it as their exchange's ErrorWriter, so every step of the shared request
// pipeline answers in it.
#pragma once

#include <string>

#include "services/openai/openai_request.h"

namespace specline::anthropic {

std::string ErrorBody(const openai::ApiError& e);

}  // namespace specline::anthropic
