// One generation driven by gRPC's callback API instead of a blocking
// thread: the OpenAI HTTP API's streams cost no thread each while they wait
// for tokens. The scheduler's events go through the same GenerationStream
// as the gRPC API's and out to a GenerationSink. The object deletes itself
// when the scheduler call is over, after the sink's OnEnd.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/client_context.h>
#include <grpcpp/support/client_callback.h>

#include "services/generation_service.h"

namespace specline {

class AsyncGeneration final : public grpc::ClientReadReactor<internal::SubmitEvent> {
 public:
  // Starts the call; `entry` is the request's admission (already counted).
  static void Start(GenerationService& service, Api api, std::string principal, std::string id,
                    PreparedRequest prepared, std::shared_ptr<grpc::ClientContext> call,
                    std::shared_ptr<ActiveRequests::Entry> entry,
                    std::shared_ptr<GenerationSink> sink);

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  AsyncGeneration(GenerationService& service, Api api, std::string principal, std::string id,
                  PreparedRequest prepared, std::shared_ptr<grpc::ClientContext> call,
                  std::shared_ptr<ActiveRequests::Entry> entry,
                  std::shared_ptr<GenerationSink> sink);

  GenerationService& service_;
  const Api api_;
  const std::string principal_;
  const std::string id_;
  std::shared_ptr<grpc::ClientContext> call_;
  std::shared_ptr<ActiveRequests::Entry> entry_;
  std::shared_ptr<GenerationSink> sink_;
  GenerationStream stream_;
  internal::SubmitRequest submit_;
  internal::SubmitEvent event_;
};

}  // namespace specline
