#include "services/llama_server/server_props.h"

#include "services/llama_server/completion_request.h"
#include "services/llama_server/token_pieces.h"

namespace specline::llama_server {
namespace {

using nlohmann::json;

#ifndef SPECLINE_VERSION
#define SPECLINE_VERSION "dev"
#endif

// The settings a /completion with no fields runs with: the same parsing
// fills them, so they cannot drift from what requests get.
json DefaultParams() {
  CompletionRequest defaults;
  ReadCompletionFields(json::object(), &defaults);
  json params = defaults.settings;
  params["samplers"] = {"top_k", "top_p", "min_p", "temperature"};
  return params;
}

json Slot(int id, int32_t n_ctx, bool processing) {
  return {{"id", id}, {"id_task", -1}, {"n_ctx", n_ctx}, {"is_processing", processing}, {"params", DefaultParams()}};
}

std::string TokenText(const Tokenizer* tokenizer, int32_t id) {
  return tokenizer && id >= 0 ? TokenPiece(*tokenizer, id) : std::string();
}

}  // namespace

json PropsJson(GenerationService& service, int32_t n_ctx) {
  const ServedModel& m = service.served_model();
  json settings = Slot(0, n_ctx, false);
  settings.erase("id_task");
  return {{"default_generation_settings", settings},
          {"total_slots", service.max_concurrent_streams()},
          {"model_alias", service.model_name()},
          {"model_path", m.model_file},
          {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
          {"chat_template", m.chat_template ? m.chat_template->source() : std::string()},
          {"bos_token", TokenText(m.tokenizer, m.tokenizer ? m.tokenizer->bos_id() : -1)},
          {"eos_token", TokenText(m.tokenizer, m.tokenizer ? m.tokenizer->eos_id() : -1)},
          {"build_info", std::string("specline ") + SPECLINE_VERSION},
          {"endpoint_slots", true},
          {"endpoint_props", false},
          {"endpoint_metrics", true},
          {"is_sleeping", false}};
}

std::optional<json> SlotsJson(GenerationService& service, int32_t n_ctx) {
  const std::optional<internal::SchedulerStats> stats = service.scheduler_load().Latest();
  if (!stats) return std::nullopt;
  json slots = json::array();
  for (int i = 0; i < stats->running(); ++i) slots.push_back(Slot(i, n_ctx, true));
  if (service.active().size() < service.max_concurrent_streams())
    slots.push_back(Slot(stats->running(), n_ctx, false));
  return slots;
}

}  // namespace specline::llama_server
