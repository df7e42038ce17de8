// Everything one specline-stage process runs: the model shard (one
// slice per layer range, on the CPU or a GPU), the runners chained by the
// in-process transport, the data listener, the gRPC control server and the
// metrics endpoint. Split from main() so it can be started in-process too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "model/formats/model_source.h"
#include "nlohmann/json.hpp"
#include "stage_worker/stage_flags.h"
#include "stage_worker/stage_metrics.h"
#include "stage_worker/stage_runner.h"
#include "stage_worker/stage_service.h"

namespace specline {

// The data plane's frame limit for a stage: the largest micro-batch the
// stage can be sent (a slot per KV position, each with its hidden row and at
// most one tap row per layer).
size_t LargestBatchBytes(const ModelConfig& config, int64_t kv_capacity_tokens);

class StageProcess {
 public:
  // Loads the shard, binds every port and starts the runners. Errors:
  // INVALID_ARGUMENT for ranges outside the model, UNAVAILABLE for ports
  // that cannot be bound; model file errors come as ModelFormatError.
  static absl::StatusOr<std::unique_ptr<StageProcess>> Start(const StageFlags& flags);
  ~StageProcess();

  // {"grpc": N, "data": "tcp://...", "metrics": M (-1 when off), "pid": P}
  nlohmann::json PortInfo() const;
  // Stops the control server first (no new resets mid-shutdown), then the
  // runners, first stage first. Idempotent.
  void Stop();

 private:
  StageProcess() = default;

  StageFlags flags_;
  std::unique_ptr<ModelSource> model_;
  std::vector<std::unique_ptr<SliceBackend>> slices_;
  std::vector<std::unique_ptr<ModelSource>> weight_set_models_;  // --weight-set, by id - 1
  std::vector<std::unique_ptr<SliceBackend>> weight_set_slices_;
  std::vector<std::unique_ptr<StageRunner>> runners_;
  std::unique_ptr<StageMetrics> metrics_;
  std::unique_ptr<StageServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string data_address_;
  int grpc_port_ = 0;
  int metrics_port_ = -1;
  bool stopped_ = false;
};


}  // namespace specline
