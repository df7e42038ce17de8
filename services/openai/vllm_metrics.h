// The vLLM series that routers and endpoint pickers scrape from the pod
// they route to (the Gateway API Inference Extension's EPP, llm-d,
// vllm-router; docs/metrics.md, "vLLM's names"), served as GET /metrics on
// the HTTP API's port: the scheduler's waiting and running requests, the
// KV pool's usage and its block size and count, under vLLM's names and
// labels. Only these: the API port is public, and the gateway's own
// series (which may name principals) stay on its metrics port.
#pragma once

#include <optional>
#include <string>

#include "specline/internal/scheduler.pb.h"

namespace specline::openai {

// Prometheus text (format 0.0.4) of the series for `stats` (the
// scheduler's last answer; nullopt: none, so no series), labelled with
// `model_name` as vLLM labels them with its served model name.
std::string VllmMetricsText(const std::string& model_name,
                            const std::optional<internal::SchedulerStats>& stats);

}  // namespace specline::openai
