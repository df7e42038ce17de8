#include "scheduler/stage_control.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/cluster_secret.h"
#include "specline/internal/stage.grpc.pb.h"

namespace specline::scheduler {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

class GrpcStageControl : public StageControl {
 public:
  GrpcStageControl(std::string address, const std::string& secret)
      : address_(std::move(address)),
        stub_(internal::StageWorker::NewStub(InternalChannel(address_, secret))) {}

  absl::StatusOr<internal::StageInfo> GetInfo(std::chrono::milliseconds deadline) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    internal::StageInfo info;
    grpc::Status s = stub_->GetInfo(&ctx, internal::StageInfoRequest(), &info);
    if (!s.ok()) return FromGrpc(s);
    return info;
  }

  absl::Status Reset(std::chrono::milliseconds deadline,
                     const std::string& report_address) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    internal::ResetRequest req;
    req.set_report_address(report_address);
    internal::ResetResponse resp;
    return FromGrpc(stub_->Reset(&ctx, req, &resp));
  }

  const std::string& address() const override { return address_; }

 private:
  std::string address_;
  std::unique_ptr<internal::StageWorker::Stub> stub_;
};

}  // namespace

std::unique_ptr<StageControl> ConnectStageControl(const std::string& address,
                                                  const std::string& cluster_secret) {
  return std::make_unique<GrpcStageControl>(address, cluster_secret);
}

}  // namespace specline::scheduler
