#include "services/llama_server/server_errors.h"

#include <nlohmann/json.hpp>

namespace specline::llama_server {

std::string NativeErrorBody(const openai::ApiError& e) {
  std::string type = e.type;
  if (e.code == "context_length_exceeded") type = "exceed_context_size_error";
  else if (e.http_status == 503) type = "unavailable_error";
  else if (e.http_status == 501) type = "not_supported_error";
  else if (e.http_status >= 500) type = "server_error";
  const nlohmann::json body = {{"error", {{"code", e.http_status}, {"message", e.message}, {"type", type}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace specline::llama_server
