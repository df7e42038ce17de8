// vLLM's render endpoints (POST /v1/chat/completions/render and
// /v1/completions/render): a request's prompt as the model would get it,
// answered in vLLM's GenerateRequest shape, with nothing generated.
// vllm-router's cache_aware and kv_aware policies call them before routing
// and match prompts by the `token_ids` they return (docs/routers.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/request_builder.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

// One rendered prompt: {"request_id", "token_ids", "features": null,
// "sampling_params": {...}, "model", "stream", "stream_options",
// "cache_salt", "priority": 0, "kv_transfer_params": null}. `request` is the
// parsed request of that prompt and `prepared` what the gateway made of it
// (the same tokenization and limits as a generation: PrepareRequest);
// `model` is the name the request sent ("" = null).
nlohmann::json RenderedPromptJson(const std::string& request_id, const std::string& model,
                                  const ParsedRequest& parsed, const v1::GenerateRequest& request,
                                  const PreparedRequest& prepared);

}  // namespace specline::openai
