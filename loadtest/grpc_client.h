// The real SendFn: one streaming Generate call on a shared channel, every
// message timestamped with steady_clock on receipt.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "common/status_names.h"
#include "loadtest/runner.h"

namespace specline::loadtest {

struct ClientOptions {
  RequestOptions request;
  std::string bearer_token;  // "authorization: Bearer ..." when set
  double timeout = 0;        // seconds per request; 0 = none
  std::string id_prefix = "lt";
};

// Returns a thread-safe SendFn bound to `channel`.
SendFn GrpcSender(std::shared_ptr<grpc::Channel> channel, ClientOptions options);

}  // namespace specline::loadtest
