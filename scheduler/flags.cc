#include "scheduler/flags.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_secret.h"
#include "common/flag_map.h"
#include "scheduler/policies/registry.h"

namespace specline::scheduler {

std::string SchedulerUsage() {
  return "usage: specline-scheduler --model PATH --stage-grpc HOST:PORT[,HOST:PORT...]\n"
         "  [--tokenizer PATH]  the vocabulary structured output's grammars use (default:\n"
         "                      the model's own, as the gateway's)\n"
         "  [--data-listen tcp://HOST:PORT] [--host H] [--grpc-port N] [--metrics-port N|-1]\n"
         "  [--port-file PATH] [--threads N] [--max-waiting N] [--max-batch-tokens N]\n"
         "  [--prefill-chunk N] [--max-inflight N] [--kv-capacity-tokens N] [--kv-block-size N]\n"
         "  [--batch-timeout-ms N] [--drain-timeout-ms N] [--log-level LEVEL]\n"
         "  [--prefix-cache on|off]  reuse the KV of prompt prefixes (default on)\n"
         "  [--kv-events-config JSON]  publish the prefix cache's KV events for routers,\n"
         "                     vLLM's KVEventsConfig: {\"enable_kv_cache_events\":true,\n"
         "                     \"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":\"tcp://*:5558\"}\n"
         "  [--admission fair|fifo]  waiting requests: round robin across tenants (default)\n"
         "                     or first come, first served\n"
         "  [--max-kv-blocks-per-tenant N]  KV blocks one tenant's running requests may\n"
         "                     hold (default 0: no limit)\n"
         "  [--retry-window-ms N] [--max-attempts N]  (requests a pipeline failure caught\n"
         "                     before their first token wait this long for recovery and restart)\n"
         "  [--stage-startup-timeout-s N]  stages not answering yet are waited for quietly\n"
         "                     this long after start, then warned about (default 300)\n"
         "  [--cluster-secret-file PATH]  internal plane's shared secret (docs/security.md)\n"
         "  [--device cpu|cuda|cuda:N] [--dtype bf16|f16]   (where the output head runs)\n"
         "(--stages is accepted as a synonym of --stage-grpc)\n"
         "Speculation and decoding policies:\n" +
         PolicyFlagUsage(AllPolicyFlags(), 27);
}

absl::StatusOr<SchedulerFlags> ParseSchedulerFlags(int argc, char** argv) {
  SchedulerFlags f;
  auto parsed = ParseFlagMap(argc, argv);
  if (!parsed.ok()) return parsed.status();
  const std::map<std::string, std::string>& values = *parsed;
  EngineOptions& e = f.engine;
  int timeout_ms = static_cast<int>(e.batch_timeout.count());
  int retry_ms = static_cast<int>(e.retry_window.count());
  auto startup_s = static_cast<int>(e.stage_startup_timeout.count());
  std::string device = "cpu", dtype = "bf16";
  for (auto& [name, value] : values) {
    absl::Status st;
    if (name == "model") f.model = value;
    else if (name == "tokenizer") f.tokenizer = value;
    else if (name == "stage-grpc" || name == "stages") {
      f.stage_grpc = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (name == "data-listen") f.data_listen = value;
    else if (name == "host") f.host = value;
    else if (name == "grpc-port") st = ParseNumber(name, value, &f.grpc_port);
    else if (name == "metrics-port") st = ParseNumber(name, value, &f.metrics_port);
    else if (name == "port-file") f.port_file = value;
    else if (name == "threads") st = ParseNumber(name, value, &e.threads);
    else if (name == "max-waiting") st = ParseNumber(name, value, &e.max_waiting);
    else if (name == "admission") {
      if (!ParseAdmissionPolicy(value, &e.admission)) {
        st = absl::InvalidArgumentError(
            absl::StrCat("--admission: \"", value, "\" is not fifo or fair"));
      }
    }
    else if (name == "max-kv-blocks-per-tenant") {
      st = ParseNumber(name, value, &e.max_kv_blocks_per_tenant);
    }
    else if (name == "max-batch-tokens") st = ParseNumber(name, value, &e.batch.max_batch_tokens);
    else if (name == "prefill-chunk") st = ParseNumber(name, value, &e.batch.prefill_chunk);
    else if (name == "max-inflight") st = ParseNumber(name, value, &e.max_inflight);
    else if (name == "kv-capacity-tokens") st = ParseNumber(name, value, &e.kv_capacity_tokens);
    else if (name == "kv-block-size") st = ParseNumber(name, value, &e.kv_block_size);
    else if (name == "batch-timeout-ms") st = ParseNumber(name, value, &timeout_ms);
    else if (name == "drain-timeout-ms") st = ParseNumber(name, value, &f.drain_timeout_ms);
    else if (name == "log-level") f.log_level = value;
    else if (name == "retry-window-ms") st = ParseNumber(name, value, &retry_ms);
    else if (name == "max-attempts") st = ParseNumber(name, value, &e.max_attempts);
    else if (name == "stage-startup-timeout-s") st = ParseNumber(name, value, &startup_s);
    else if (name == "cluster-secret-file") {
      absl::StatusOr<std::string> secret = ReadClusterSecret(value);
      if (!secret.ok()) return secret.status();
      f.cluster_secret = *std::move(secret);
    }
    else if (name == "prefix-cache") st = ParseOnOff(name, value, &e.prefix_caching);
    else if (name == "kv-events-config") {
      absl::StatusOr<KvEventsConfig> config = ParseKvEventsConfig(value);
      if (!config.ok()) return config.status();
      f.kv_events = *std::move(config);
    }
    else if (name == "device") device = value;
    else if (name == "dtype") dtype = value;
    else if (const PolicyFlag* flag = FindPolicyFlag(name)) st = flag->parse(value, e.spec);
    else return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!st.ok()) return st;
  }
  absl::StatusOr<DeviceConfig> spec = ParseDeviceSpec(device, dtype);
  if (!spec.ok()) return spec.status();
  e.device = *spec;
  e.batch_timeout = std::chrono::milliseconds(timeout_ms);
  e.retry_window = std::chrono::milliseconds(retry_ms);
  if (retry_ms < 0) return absl::InvalidArgumentError("--retry-window-ms must be >= 0");
  if (startup_s < 0) return absl::InvalidArgumentError("--stage-startup-timeout-s must be >= 0");
  e.stage_startup_timeout = std::chrono::seconds(startup_s);
  if (!values.count("default-policy")) e.spec.default_mode = DefaultPolicy(e.spec);
  if (e.max_attempts < 1) return absl::InvalidArgumentError("--max-attempts must be >= 1");
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (f.stage_grpc.empty()) return absl::InvalidArgumentError("--stage-grpc is required");
  if (f.grpc_port < 0 || f.grpc_port > 65535) {
    return absl::InvalidArgumentError("--grpc-port must be in [0, 65535]");
  }
  if (f.metrics_port < -1 || f.metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics-port must be in [-1, 65535]");
  }
  if (e.max_waiting < 0) return absl::InvalidArgumentError("--max-waiting must be >= 0");
  if (e.max_kv_blocks_per_tenant < 0) {
    return absl::InvalidArgumentError("--max-kv-blocks-per-tenant must be >= 0");
  }
  if (e.batch.max_batch_tokens < 1) return absl::InvalidArgumentError("--max-batch-tokens must be >= 1");
  if (e.batch.prefill_chunk < 1) return absl::InvalidArgumentError("--prefill-chunk must be >= 1");
  if (e.max_inflight < 0) return absl::InvalidArgumentError("--max-inflight must be >= 0");
  if (e.kv_capacity_tokens < 0) return absl::InvalidArgumentError("--kv-capacity-tokens must be >= 0");
  if (e.kv_block_size < 1) return absl::InvalidArgumentError("--kv-block-size must be >= 1");
  if (timeout_ms < 1) return absl::InvalidArgumentError("--batch-timeout-ms must be >= 1");
  if (f.drain_timeout_ms < 0) return absl::InvalidArgumentError("--drain-timeout-ms must be >= 0");
  return f;
}

}  // namespace specline::scheduler
