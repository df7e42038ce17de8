// Prometheus metrics of the scheduler (names follow vLLM's with a specline_
// prefix; see /work/shared/REFERENCES.md "Serving conventions"). The engine
// updates them; main() exposes the registry on /metrics.
#pragma once

#include <memory>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace specline::scheduler {

struct SchedulerMetrics {
  explicit SchedulerMetrics(std::shared_ptr<prometheus::Registry> registry = nullptr);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Histogram* queue_time;   // arrival -> first scheduled (s)
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generation_tokens;
  prometheus::Histogram* step_seconds;  // batch round trip through the pipeline
  prometheus::Histogram* batch_slots;
  prometheus::Gauge* kv_free_tokens;
  prometheus::Gauge* pipeline_up;
  prometheus::Counter* pipeline_failures;
};

}  // namespace specline::scheduler
