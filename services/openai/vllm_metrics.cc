#include "services/openai/vllm_metrics.h"

#include <vector>

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include "services/scheduler_load.h"

namespace specline::openai {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

MetricFamily Gauge(const char* name, const char* help, std::vector<ClientMetric::Label> labels,
                   double value) {
  ClientMetric sample;
  sample.label = std::move(labels);
  sample.gauge.value = value;
  return MetricFamily{name, help, prometheus::MetricType::Gauge, {sample}};
}

}  // namespace

std::string VllmMetricsText(const std::string& model_name,
                            const std::optional<internal::SchedulerStats>& stats) {
  if (!stats) return std::string();
  // vLLM's labels on its engine gauges: the served model, and the engine
  // (one here: the pipeline behind this gateway).
  const std::vector<ClientMetric::Label> engine = {{"engine", "0"}, {"model_name", model_name}};
  const double usage = KvCacheUsage(*stats);
  std::vector<MetricFamily> families = {
      Gauge("vllm:num_requests_running", "Requests the scheduler has admitted to the pipeline.",
            engine, stats->running()),
      Gauge("vllm:num_requests_waiting", "Requests queued in the scheduler, not yet admitted.",
            engine, stats->waiting()),
      Gauge("vllm:kv_cache_usage_perc",
            "Share of a stage's KV blocks admission has handed out (0-1).", engine, usage),
      // vLLM's older name (deprecated by vllm#18354); the endpoint
      // picker's default until gateway-api-inference-extension#1905 (Nov 2025).
      Gauge("vllm:gpu_cache_usage_perc", "The same as vllm:kv_cache_usage_perc (the older name).",
            engine, usage),
  };
  // Known once the pipeline came up. The picker's prefix scorer sizes its
  // index by these labels.
  if (const std::optional<KvBlockPool> pool = KvBlockPoolOf(*stats)) {
    families.push_back(Gauge("vllm:cache_config_info", "The KV cache's configuration, as labels.",
                             {{"block_size", std::to_string(pool->block_size)},
                              {"num_gpu_blocks", std::to_string(pool->num_blocks)}},
                             1));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace specline::openai
