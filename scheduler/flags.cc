#include "scheduler/flags.h"

#include <charconv>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cluster_secret.h"
#include "common/flag_map.h"
#include "proto/policy_names.h"

namespace specline::scheduler {
namespace {

absl::Status ParseSpecPolicy(const std::string& text, DraftGate* out) {
  for (DraftGate p : {DraftGate::kAuto, DraftGate::kAlways, DraftGate::kNever}) {
    if (text == DraftGateName(p)) {
      *out = p;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--spec-policy: \"", text, "\" is not auto, always or never"));
}

absl::Status ParseMode(const std::string& text, v1::DecodingPolicy* out) {
  absl::StatusOr<v1::DecodingPolicy> p = PolicyFromName(text);
  if (!p.ok() || *p == v1::DECODING_POLICY_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--default-policy: \"", text, "\" is not ", kPolicyNames));
  }
  *out = *p;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SchedulerFlags> ParseSchedulerFlags(int argc, char** argv) {
  SchedulerFlags f;
  auto parsed = ParseFlagMap(argc, argv);
  if (!parsed.ok()) return parsed.status();
  const std::map<std::string, std::string>& values = *parsed;
  EngineOptions& e = f.engine;
  int timeout_ms = static_cast<int>(e.batch_timeout.count());
  int retry_ms = static_cast<int>(e.retry_window.count());
  std::string device = "cpu", dtype = "bf16";
  bool default_policy_given = false;
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
    else if (name == "cluster-secret-file") {
      absl::StatusOr<std::string> secret = ReadClusterSecret(value);
      if (!secret.ok()) return secret.status();
      f.cluster_secret = *std::move(secret);
    }
    else if (name == "ppsd-head") e.spec.ppsd_head = value;
    else if (name == "spd-head") e.spec.spd_head = value;
    else if (name == "spd-drafter") e.spec.spd_drafter = value;
    else if (name == "recycle-drafts") st = ParseNumber(name, value, &e.spec.recycle_drafts);
    else if (name == "recycle-candidates") st = ParseNumber(name, value, &e.spec.recycle_candidates);
    else if (name == "recycle-recent-tokens") {
      st = ParseNumber(name, value, &e.spec.recycle_recent_tokens);
    }
    else if (name == "lookup-ngram") {
      // "MIN:MAX", or one number for both.
      const std::vector<std::string> parts = absl::StrSplit(value, ':');
      st = ParseNumber(name, parts.front(), &e.spec.lookup_min_ngram);
      if (st.ok()) st = ParseNumber(name, parts.back(), &e.spec.lookup_max_ngram);
      if (st.ok() && (parts.size() > 2 || e.spec.lookup_min_ngram < 1 ||
                      e.spec.lookup_max_ngram < e.spec.lookup_min_ngram)) {
        st = absl::InvalidArgumentError("--lookup-ngram: MIN:MAX with 1 <= MIN <= MAX");
      }
    }
    else if (name == "ptp-head") e.spec.ptp_head = value;
    else if (name == "ptp-n-aux") st = ParseNumber(name, value, &e.spec.ptp_n_aux);
    else if (name == "pipo-head") e.spec.pipo_head = value;
    else if (name == "pipo-tau") st = ParseNumber(name, value, &e.spec.pipo_tau);
    else if (name == "allow-oracle") st = ParseBool(name, value, &e.spec.allow_oracle);
    else if (name == "prefix-cache") st = ParseOnOff(name, value, &e.prefix_caching);
    else if (name == "spec-policy") st = ParseSpecPolicy(value, &e.spec.policy);
    else if (name == "default-policy") {
      st = ParseMode(value, &e.spec.default_mode);
      default_policy_given = true;
    }
    else if (name == "spec-min-acceptance") st = ParseNumber(name, value, &e.spec.min_acceptance);
    else if (name == "spec-probe-interval") st = ParseNumber(name, value, &e.spec.probe_interval);
    else if (name == "spec-max-drafts") st = ParseNumber(name, value, &e.spec.max_drafts);
    else if (name == "draft-kv-capacity-tokens") {
      st = ParseNumber(name, value, &e.spec.draft_kv_capacity_tokens);
    }
    else if (name == "device") device = value;
    else if (name == "dtype") dtype = value;
    else return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!st.ok()) return st;
  }
  absl::StatusOr<DeviceConfig> spec = ParseDeviceSpec(device, dtype);
  if (!spec.ok()) return spec.status();
  e.device = *spec;
  e.batch_timeout = std::chrono::milliseconds(timeout_ms);
  e.retry_window = std::chrono::milliseconds(retry_ms);
  if (retry_ms < 0) return absl::InvalidArgumentError("--retry-window-ms must be >= 0");
  if (e.spec.spd_drafter != "module" && e.spec.spd_drafter != "recycle") {
    return absl::InvalidArgumentError(absl::StrCat("--spd-drafter: \"", e.spec.spd_drafter,
                                                   "\" is not module or recycle"));
  }
  if (e.spec.recycle_drafts < 0) return absl::InvalidArgumentError("--recycle-drafts must be >= 0");
  if (e.spec.recycle_candidates < 1) {
    return absl::InvalidArgumentError("--recycle-candidates must be >= 1");
  }
  if (e.spec.recycle_recent_tokens < 0) {
    return absl::InvalidArgumentError("--recycle-recent-tokens must be >= 0");
  }
  // Requests that name no policy speculate: recycle is lossless, needs no
  // head, and measured at least plain decoding's speed on every prompt
  // class at 1 and 2 stages (docs/benchmarks.md, issue 29). Its draft-length
  // rule drafts nothing where drafts do not pay.
  if (!default_policy_given) {
    e.spec.default_mode = e.spec.recycle_drafts > 0 ? v1::DECODING_POLICY_RECYCLE
                                                    : v1::DECODING_POLICY_AUTOREGRESSIVE;
  }
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
