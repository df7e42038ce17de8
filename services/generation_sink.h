// Where an asynchronously driven generation (the OpenAI HTTP API) delivers
// its messages. Called from gRPC's callback threads, one call at a time per
// request: any number of OnMessage, then exactly one OnEnd.
#pragma once

#include <cstdint>

#include <grpcpp/support/status.h>

#include "specline/v1/generation.pb.h"

namespace specline {

class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void OnMessage(const v1::GenerateResponse& message) = 0;
  // OK after the final message (finish reason set); otherwise the error,
  // with the seconds after which a retry may succeed when a limit said so
  // (0: it did not).
  virtual void OnEnd(const grpc::Status& status, int64_t retry_after_seconds) = 0;
  // True once the client has gone; the request then ends CANCELLED.
  virtual bool ClientGone() const = 0;
};

}  // namespace specline
