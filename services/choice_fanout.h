// n > 1 (and the OpenAI completions' list of prompts): several choices of
// one request, each a scheduler stream of its own, delivered to one sink
// with GenerateResponse.index set.
//
// The prompt is prefilled once: choice 0 is submitted first, and the others
// only once its first token arrived. By then its prompt's full KV blocks
// are published in the prefix cache (scheduler/prefix_cache.h), so the
// other choices find them there and compute only the prompt's tail.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "services/generation_service.h"

namespace specline {

// The choices `request.n` asks for: copies of `request` with n cleared and
// seed + i for choice i when the request is seeded (unseeded: each choice
// draws its own random seed).
std::vector<v1::GenerateRequest> ExpandChoices(const v1::GenerateRequest& request);

class ChoiceFanout : public std::enable_shared_from_this<ChoiceFanout> {
 public:
  struct Choice {
    std::string id;  // the scheduler request id: choice 0's is the request's
    PreparedRequest prepared;
  };

  ChoiceFanout(GenerationService& service, Api api, std::string principal,
               std::vector<Choice> choices, std::shared_ptr<GenerationSink> sink);

  // Admits and starts choice 0. An error means nothing was started and the
  // sink will hear nothing; on OK it gets every choice's messages and then
  // one OnEnd, once every choice has ended (the first error, if any).
  grpc::Status Start(std::shared_ptr<grpc::ClientContext>* call, int64_t* retry_after_seconds);

  // From the choices' own sinks.
  void OnMessage(int index, v1::GenerateResponse message);
  void OnEnd(int index, const grpc::Status& status, int64_t retry_after_seconds);
  bool ClientGone() const { return sink_->ClientGone(); }

 private:
  class ChoiceSink;
  // Admits and starts choice `index`; an error is that choice's end.
  grpc::Status StartChoice(int index, std::shared_ptr<grpc::ClientContext>* call,
                           int64_t* retry_after_seconds);
  void StartRest();

  GenerationService& service_;
  const Api api_;
  const std::string principal_;
  std::vector<Choice> choices_;
  std::shared_ptr<GenerationSink> sink_;

  std::mutex mu_;
  bool rest_started_ = false;
  int ended_ = 0;
  grpc::Status first_error_;
  int64_t retry_after_seconds_ = 0;
};

}  // namespace specline
