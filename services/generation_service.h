// specline.v1.Generation: the public API. Each Generate call becomes one
// scheduler Submit call; tokens coming back are detokenized, cut at stop
// strings and streamed on. Synchronous gRPC: one handler thread per open
// stream, bounded by --max-concurrent-streams.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "services/active_requests.h"
#include "services/gateway_metrics.h"
#include "services/request_builder.h"
#include "specline/internal/scheduler.grpc.pb.h"
#include "specline/v1/generation.grpc.pb.h"

namespace specline {

class GenerationService final : public v1::Generation::Service {
 public:
  struct Options {
    std::string model_name;  // reported by GetModelInfo
    std::string auth_token;  // empty: no authentication
    int max_concurrent_streams = 256;
  };

  GenerationService(ServedModel model, std::shared_ptr<grpc::ChannelInterface> scheduler,
                    GatewayMetrics& metrics, Options options);

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* ctx, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::ModelInfoRequest* request,
                            v1::ModelInfo* response) override;

  // Refuse new Generate calls (UNAVAILABLE) from now on.
  void StartDrain() { draining_ = true; }
  ActiveRequests& active() { return active_; }

 private:
  grpc::Status CheckAuth(const grpc::ServerContext& ctx) const;
  grpc::Status Fail(const grpc::Status& status);  // counts it, returns it
  grpc::Status Stream(grpc::ServerContext* ctx, const std::string& id, PreparedRequest prepared,
                      grpc::ServerWriter<v1::GenerateResponse>* writer);

  const ServedModel model_;
  std::unique_ptr<internal::Scheduler::Stub> scheduler_;
  GatewayMetrics& metrics_;
  const Options options_;
  ActiveRequests active_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace specline
