// Command line of specline-scheduler.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/engine.h"

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
};

inline constexpr const char* kSchedulerUsage =
    "usage: specline-scheduler --model PATH --stage-grpc HOST:PORT[,HOST:PORT...]\n"
    "  [--tokenizer PATH]  the vocabulary structured output's grammars use (default:\n"
    "                      the model's own, as the gateway's)\n"
    "  [--data-listen tcp://HOST:PORT] [--host H] [--grpc-port N] [--metrics-port N|-1]\n"
    "  [--port-file PATH] [--threads N] [--max-waiting N] [--max-batch-tokens N]\n"
    "  [--prefill-chunk N] [--max-inflight N] [--kv-capacity-tokens N] [--kv-block-size N]\n"
    "  [--batch-timeout-ms N] [--drain-timeout-ms N] [--log-level LEVEL]\n"
    "  [--prefix-cache on|off]  reuse the KV of prompt prefixes (default on)\n"
    "  [--admission fair|fifo]  waiting requests: round robin across tenants (default)\n"
    "                     or first come, first served\n"
    "  [--max-kv-blocks-per-tenant N]  KV blocks one tenant's running requests may\n"
    "                     hold (default 0: no limit)\n"
    "  [--retry-window-ms N] [--max-attempts N]  (requests a pipeline failure caught\n"
    "                     before their first token wait this long for recovery and restart)\n"
    "  [--cluster-secret-file PATH]  internal plane's shared secret (docs/security.md)\n"
    "  [--ppsd-head DIR] [--spd-head DIR] [--ptp-head DIR] [--ptp-n-aux N]\n"
    "  [--pipo-head DIR] [--pipo-tau X] [--default-policy ar|ppsd|spd|ptp|pipo|recycle]\n"
    "                     (default: recycle, or ar with --recycle-drafts 0)\n"
    "  [--recycle-drafts N] [--recycle-candidates N] [--lookup-ngram MIN:MAX]\n"
    "  [--recycle-recent-tokens N]  recent requests' tokens drafted from (0: none)\n"
    "  [--spd-drafter module|recycle]\n"
    "  [--spec-policy auto|always|never] [--spec-min-acceptance X] [--spec-probe-interval N]\n"
    "  [--spec-max-drafts N] [--draft-kv-capacity-tokens N] [--allow-oracle true|false]\n"
    "  [--device cpu|cuda|cuda:N] [--dtype bf16|f16]   (where the output head runs)\n"
    "(--stages is accepted as a synonym of --stage-grpc)\n";

// INVALID_ARGUMENT naming the flag on anything malformed or missing.
absl::StatusOr<SchedulerFlags> ParseSchedulerFlags(int argc, char** argv);

}  // namespace specline::scheduler
