#include "services/openai/router_endpoints.h"

#include <nlohmann/json.hpp>

#include "services/openai/kv_event_sources.h"
#include "services/openai/vllm_metrics.h"
#include "services/scheduler_load.h"

namespace specline::openai {

void RouterEndpoints::Health(HttpExchange& x) const {
  if (x.verb() != http::verb::get && x.verb() != http::verb::head) return pipeline_.MethodNotAllowed(x, "GET");
  // While the pipeline is not (yet, or any more) up, requests would only
  // get 503s too.
  if (service_.draining()) return x.SendJson(http::status::service_unavailable, R"({"status":"draining"})");
  if (!service_.pipeline_ready())
    return x.SendJson(http::status::service_unavailable, R"({"status":"pipeline not ready"})");
  x.SendJson(http::status::ok, R"({"status":"ok"})");
}

// SGLang's load probe (vllm-router's power_of_two polls it, without
// credentials: it is a count, like /health).
void RouterEndpoints::GetLoad(HttpExchange& x) const {
  if (x.verb() != http::verb::get) return pipeline_.MethodNotAllowed(x, "GET");
  const int load = service_.active().size();
  x.SendJson(http::status::ok, nlohmann::json{{"load", load}, {"num_reqs", load}}.dump());
}

void RouterEndpoints::ServerInfo(HttpExchange& x) const {
  if (x.verb() != http::verb::get) return pipeline_.MethodNotAllowed(x, "GET");
  if (!pipeline_.Authenticate(x)) return;
  const ServedModel& m = service_.served_model();
  const std::string& name = service_.model_name();
  nlohmann::json info = {{"model_id", name},
                         {"model_path", name},
                         {"served_model_name", name},
                         {"tokenizer_path", name},
                         {"is_generation", true},
                         {"max_model_len", UsableContext(m, pipeline_.RulesNow())},
                         {"engine", "specline"}};
  // vllm-router's kv_aware hashes prompts in blocks of this size.
  if (const auto stats = service_.scheduler_load().Latest()) {
    if (const std::optional<KvBlockPool> pool = KvBlockPoolOf(*stats)) {
      info["block_size"] = pool->block_size;
      info["num_gpu_blocks"] = pool->num_blocks;
    }
  }
  x.SendJson(http::status::ok, info.dump());
}

// Where kv_aware routers subscribe to this pipeline's KV events; 404 while
// the scheduler publishes none (vLLM's answer with events off).
void RouterEndpoints::KvEventSources(HttpExchange& x) const {
  if (x.verb() != http::verb::get) return pipeline_.MethodNotAllowed(x, "GET");
  if (!pipeline_.Authenticate(x)) return;
  const auto stats = service_.scheduler_load().Latest();
  if (!stats || !stats->has_kv_events()) {
    ApiError e;
    e.http_status = 404;
    e.type = "not_found_error";
    e.message = "this pipeline publishes no KV events (the scheduler's --kv-events-config)";
    return pipeline_.SendError(x, e);
  }
  x.SendJson(http::status::ok, KvEventSourcesJson(stats->kv_events(), scheduler_address_).dump());
}

// vLLM's series, where routers and endpoint pickers scrape them (the port
// they route to), open like /get_load (vllm_metrics.h).
void RouterEndpoints::VllmMetrics(HttpExchange& x) const {
  if (x.verb() != http::verb::get) return pipeline_.MethodNotAllowed(x, "GET");
  x.SendBody(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
             VllmMetricsText(service_.model_name(), service_.scheduler_load().Latest()));
}

}  // namespace specline::openai
