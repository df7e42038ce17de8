// What routers, load balancers and orchestrators read of a pipeline on the
// API port besides the API itself (docs/routers.md): GET /health,
// SGLang's /get_load, /get_server_info and /get_model_info, the KV events'
// sources (/kv_event_sources) and vLLM's metric names (/metrics).
#pragma once

#include <string>

#include "services/openai/http_exchange.h"
#include "services/openai/request_pipeline.h"

namespace specline::openai {

class RouterEndpoints {
 public:
  // `scheduler_address`: the gateway's --scheduler, against which the KV
  // events' endpoints are resolved (kv_event_sources.h).
  RouterEndpoints(const RequestPipeline& pipeline, std::string scheduler_address)
      : pipeline_(pipeline), service_(pipeline.service()), scheduler_address_(std::move(scheduler_address)) {}

  // 200 when serving; 503 while draining and while the pipeline is not up.
  void Health(HttpExchange& x) const;
  void GetLoad(HttpExchange& x) const;
  void ServerInfo(HttpExchange& x) const;
  void KvEventSources(HttpExchange& x) const;
  void VllmMetrics(HttpExchange& x) const;

 private:
  const RequestPipeline& pipeline_;
  GenerationService& service_;
  const std::string scheduler_address_;
};

}  // namespace specline::openai
