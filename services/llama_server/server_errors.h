// Errors in llama-server's shape: {"error": {"code": <HTTP status>,
// "message", "type"}}, the type one of llama-server's
// (invalid_request_error, authentication_error, not_found_error,
// server_error, unavailable_error, not_supported_error,
// exceed_context_size_error): every error the native endpoints answer.
#pragma once

#include <string>

#include "services/openai/openai_request.h"

namespace specline::llama_server {

std::string NativeErrorBody(const openai::ApiError& e);

}  // namespace specline::llama_server
