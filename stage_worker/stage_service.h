// The StageWorker control service: info and reset for the stages one
// process hosts. Activations never travel here.
#pragma once

#include <string>
#include <vector>

#include "specline/internal/stage.grpc.pb.h"
#include "stage_worker/hosted_models.h"
#include "stage_worker/stage_runner.h"

namespace specline {

class StageServiceImpl final : public internal::StageWorker::Service {
 public:
  // `runners`: the consecutive stages of this process, first to last.
  StageServiceImpl(std::vector<StageRunner*> runners, std::string data_address,
                   std::string next_address, HostedModels hosted = {});

  // A process hosting several stages answers as one stage spanning their
  // layers: the scheduler addresses the process, not its internal chain.
  // KV figures are the minimum over the stages (every slot needs room in
  // each of them).
  grpc::Status GetInfo(grpc::ServerContext*, const internal::StageInfoRequest*,
                       internal::StageInfo* info) override;
  grpc::Status Reset(grpc::ServerContext*, const internal::ResetRequest*,
                     internal::ResetResponse*) override;

  // Calls without this secret are refused (docs/security.md); "" = open.
  void set_cluster_secret(std::string secret) { cluster_secret_ = std::move(secret); }

 private:
  std::string cluster_secret_;
  std::vector<StageRunner*> runners_;
  std::string data_address_, next_address_;
  HostedModels hosted_;
};

}  // namespace specline
