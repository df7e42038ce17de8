// What llama-server's GET /props and GET /slots report, filled from what
// the gateway truthfully knows: the served model (name, file, context,
// chat template, special tokens), the native endpoints' default
// generation settings, and the scheduler's last GetStats (the same poll
// /health and the routers' metrics read, services/scheduler_load.h).
// specline batches requests without fixed slots: /slots lists one slot per
// request the scheduler is running, and one idle slot while the gateway
// can take another stream (docs/llama_server_api.md).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "services/generation_service.h"

namespace specline::llama_server {

nlohmann::json PropsJson(GenerationService& service, int32_t n_ctx);
// nullopt before the scheduler's state is known.
std::optional<nlohmann::json> SlotsJson(GenerationService& service, int32_t n_ctx);

}  // namespace specline::llama_server
