#include "common/cluster_secret.h"
#include "stage_worker/stage_flags.h"

#include <charconv>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flag_map.h"
#include "nlohmann/json.hpp"

namespace specline {

absl::StatusOr<std::vector<std::pair<int, int>>> ParseLayerRanges(const std::string& text) {
  std::vector<std::pair<int, int>> ranges;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(text, ','))) {
    std::vector<std::string> ab = absl::StrSplit(part, ':');
    int a = 0, b = 0;
    if (ab.size() != 2 || !ParseNumber("layers", ab[0], &a).ok() ||
        !ParseNumber("layers", ab[1], &b).ok() || a < 0 || b <= a) {
      return absl::InvalidArgumentError(
          absl::StrCat("--layers: \"", part, "\" is not a range A:B with 0 <= A < B"));
    }
    if (!ranges.empty() && ranges.back().second != a) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers: ranges of one process must be consecutive, got ", ranges.back().first, ":",
          ranges.back().second, " then ", part));
    }
    ranges.emplace_back(a, b);
  }
  return ranges;
}

absl::Status ApplyPipelineFile(const std::string& path, const std::map<std::string, std::string>& given,
                               StageFlags* f) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--pipeline ", path, ": ", why));
  };
  std::ifstream in(path);
  if (!in) return fail("cannot be read");
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("stages") || !doc["stages"].is_array()) {
    return fail("not a JSON object with a \"stages\" array");
  }
  const nlohmann::json& stages = doc["stages"];
  if (f->stage < 0 || static_cast<size_t>(f->stage) >= stages.size()) {
    return fail(absl::StrCat("has ", stages.size(), " stages, no entry for --stage ", f->stage));
  }
  const nlohmann::json& entry = stages[f->stage];
  // A field the command line sets wins over the file.
  auto take = [&](const char* key, const char* flag, std::string* out) -> absl::Status {
    if (given.count(flag) || !entry.is_object() || !entry.contains(key)) return absl::OkStatus();
    if (!entry[key].is_string()) return fail(absl::StrCat("stages[", f->stage, "].", key, " is not a string"));
    *out = entry[key].get<std::string>();
    return absl::OkStatus();
  };
  std::string layers;
  for (absl::Status st : {take("layers", "layers", &layers), take("next", "next", &f->next),
                          take("data_advertise", "data-advertise", &f->data_advertise),
                          take("data_listen", "data-listen", &f->data_listen)}) {
    if (!st.ok()) return st;
  }
  if (!layers.empty()) {
    auto r = ParseLayerRanges(layers);
    if (!r.ok()) return fail(absl::StrCat("stages[", f->stage, "]: ", r.status().message()));
    f->layers = *r;
  }
  return absl::OkStatus();
}

absl::StatusOr<StageFlags> ParseStageFlags(int argc, char** argv) {
  StageFlags f;
  auto parsed = ParseFlagMap(argc, argv);
  if (!parsed.ok()) return parsed.status();
  const std::map<std::string, std::string>& values = *parsed;
  for (auto& [name, value] : values) {
    absl::Status st;
    if (name == "model") f.model = value;
    else if (name == "layers") {
      auto r = ParseLayerRanges(value);
      if (!r.ok()) return r.status();
      f.layers = *r;
    } else if (name == "stage") st = ParseNumber(name, value, &f.stage);
    else if (name == "data-listen") f.data_listen = value;
    else if (name == "data-advertise") f.data_advertise = value;
    else if (name == "pipeline") continue;  // applied below, after --stage is known
    else if (name == "next") f.next = value;
    else if (name == "host") f.host = value;
    else if (name == "grpc-port") st = ParseNumber(name, value, &f.grpc_port);
    else if (name == "metrics-port") st = ParseNumber(name, value, &f.metrics_port);
    else if (name == "port-file") f.port_file = value;
    else if (name == "threads") st = ParseNumber(name, value, &f.threads);
    else if (name == "kv-capacity-tokens") st = ParseNumber(name, value, &f.kv_capacity_tokens);
    else if (name == "kv-block-size") st = ParseNumber(name, value, &f.kv_block_size);
    else if (name == "log-level") f.log_level = value;
    else if (name == "device") f.device = value;
    else if (name == "dtype") f.dtype = value;
    else if (name == "cuda-graphs") st = ParseBool(name, value, &f.cuda_graphs);
    else if (name == "adapter") f.adapters = absl::StrSplit(value, ',', absl::SkipEmpty());
    else if (name == "weight-set") f.weight_sets = absl::StrSplit(value, ',', absl::SkipEmpty());
    else if (name == "cluster-secret-file") {
      absl::StatusOr<std::string> secret = ReadClusterSecret(value);
      if (!secret.ok()) return secret.status();
      f.cluster_secret = *std::move(secret);
    }
    else return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!st.ok()) return st;
  }
  if (auto it = values.find("pipeline"); it != values.end()) {
    if (absl::Status st = ApplyPipelineFile(it->second, values, &f); !st.ok()) return st;
  }
  if (f.model.empty()) return absl::InvalidArgumentError("--model is required");
  if (f.layers.empty()) return absl::InvalidArgumentError("--layers is required");
  if (f.next.empty()) return absl::InvalidArgumentError("--next is required");
  if (f.stage < 0) return absl::InvalidArgumentError("--stage must be >= 0");
  if (f.grpc_port < 0 || f.grpc_port > 65535) {
    return absl::InvalidArgumentError("--grpc-port must be in [0, 65535]");
  }
  if (f.metrics_port < -1 || f.metrics_port > 65535) {
    return absl::InvalidArgumentError("--metrics-port must be in [-1, 65535]");
  }
  if (f.kv_block_size <= 0) return absl::InvalidArgumentError("--kv-block-size must be > 0");
  if (f.kv_capacity_tokens < f.kv_block_size) {
    return absl::InvalidArgumentError("--kv-capacity-tokens must be at least one block");
  }
  return f;
}

}  // namespace specline
