// Command line of specline-scheduler.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/engine.h"
#include "scheduler/kv_event_publisher.h"

namespace specline::scheduler {

struct SchedulerFlags {
  std::string model;
  // Structured output's vocabulary ("" = the model's own tokenizer; none
  // found: requests with a response format are refused).
  std::string tokenizer;
  std::vector<std::string> stage_grpc;  // control addresses, pipeline order
  std::string data_listen = "tcp://127.0.0.1:0";
  std::string host = "127.0.0.1";  // gRPC and /metrics bind here
  int grpc_port = 0;               // 0 = pick
  int metrics_port = 0;            // 0 = pick, -1 = off
  std::string port_file;
  int drain_timeout_ms = 30000;
  std::string log_level = "info";
  // The internal plane's shared secret (docs/security.md): required of the
  // gateway's calls, presented to the stages. "" = no internal auth.
  std::string cluster_secret;
  EngineOptions engine;
  // --kv-events-config: vLLM's JSON (scheduler/kv_event_publisher.h).
  KvEventsConfig kv_events;
};

// The core flags', then the policies' as they declare them (registry.h).
std::string SchedulerUsage();

// INVALID_ARGUMENT naming the flag on anything malformed or missing.
absl::StatusOr<SchedulerFlags> ParseSchedulerFlags(int argc, char** argv);

}  // namespace specline::scheduler
