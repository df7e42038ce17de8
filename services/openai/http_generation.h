// What every HTTP API's generation sink shares (OpenAI's, Anthropic's,
// llama-server's): the messages arrive on gRPC's threads and are handled on
// the exchange's strand, one at a time, so a generation never touches the
// connection from another thread; the exchange is held until the answer is
// written, and a client that leaves cancels the call. A subclass writes the
// answer in its API's shape.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>

#include "services/generation_sink.h"
#include "services/openai/http_exchange.h"
#include "services/openai/openai_request.h"

namespace specline::openai {

class HttpGeneration : public GenerationSink, public std::enable_shared_from_this<HttpGeneration> {
 public:
  HttpGeneration(std::shared_ptr<HttpExchange> exchange, std::string id)
      : exchange_(std::move(exchange)), id_(std::move(id)) {}

  const std::string& id() const { return id_; }
  std::shared_ptr<grpc::ClientContext> call;  // set by StartChoices

  // On the strand (the handler's, or posted from the calls below).
  virtual void HandleMessage(const v1::GenerateResponse& message) = 0;
  virtual void HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) = 0;

  // GenerationSink (gRPC's threads): posted to the strand.
  void OnMessage(const v1::GenerateResponse& message) final;
  void OnEnd(const grpc::Status& status, int64_t retry_after_seconds) final;
  bool ClientGone() const final { return gone_; }

 // Nothing to generate (max_tokens / n_predict 0): each choice ends at
  // once with its prompt's token count, as a generation's last message
  // would, and the answer is written. On the strand, after Begin.
  void FinishUngenerated(const std::vector<int>& prompt_tokens);

 protected:
  // Holds the exchange until the answer's last bytes; if the client leaves
  // before the generation ended, the call is cancelled.
  void HoldExchange();
  // The error a failed generation ended with, named in `endpoint`'s fields,
  // with the seconds after which to retry; a server error is logged.
  static ApiError EndError(Endpoint endpoint, const grpc::Status& status, int64_t retry_after_seconds);

  std::shared_ptr<HttpExchange> exchange_;
  const std::string id_;
  bool ended_ = false;  // HandleEnd ran: nothing more is written

 private:
  std::atomic<bool> gone_{false};
};

}  // namespace specline::openai
