#include "services/anthropic/anthropic_errors.h"

#include <nlohmann/json.hpp>

namespace specline::anthropic {
namespace {

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return http_status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

std::string ErrorBody(const openai::ApiError& e) {
  const nlohmann::json body = {{"type", "error"},
                               {"error", {{"type", ErrorType(e.http_status)}, {"message", e.message}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace specline::anthropic
