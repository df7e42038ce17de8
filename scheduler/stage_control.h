// Control-plane handle of one pipeline stage (StageWorker gRPC service):
// health and shard info through GetInfo, and Reset after a failure. The
// engine only sees this interface, so stages hosted in the scheduler's own
// process could be driven without gRPC.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "specline/internal/stage.pb.h"

namespace specline::scheduler {

class StageControl {
 public:
  virtual ~StageControl() = default;
  virtual absl::StatusOr<internal::StageInfo> GetInfo(std::chrono::milliseconds deadline) = 0;
  // Forgets every sequence on the stage; from now on it sends the taps it
  // produces to `report_address` (the scheduler's inbox; "" = with the batch).
  virtual absl::Status Reset(std::chrono::milliseconds deadline,
                             const std::string& report_address) = 0;
  // The control address, for messages ("127.0.0.1:50051").
  virtual const std::string& address() const = 0;
};

// A StageWorker reached over gRPC at "host:port". Every call carries the
// cluster secret (none when empty; docs/security.md). Connecting is lazy.
std::unique_ptr<StageControl> ConnectStageControl(const std::string& address,
                                                  const std::string& cluster_secret = "");

}  // namespace specline::scheduler
