// One generation of llama-server's /completion or /infill on its way to the
// client, in llama-server's native shapes: streamed, a `data: {...}` event
// per message ({"content", "tokens", "stop": false, ...}) and a final one
// with "stop": true, stop_type, timings and generation_settings (no
// [DONE]); not streamed, one object (a list of them for a list of
// prompts). It is the generation's sink, run on the exchange's strand as
// the OpenAI API's is (services/openai/openai_generation.h).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/client_context.h>
#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "services/generation_sink.h"
#include "services/openai/http_exchange.h"

namespace specline::llama_server {

class CompletionGeneration final : public GenerationSink,
                                   public std::enable_shared_from_this<CompletionGeneration> {
 public:
  struct Options {
    std::string id;     // the request id, for the logs
    std::string model;  // the served model's name
    bool stream = false;
    bool several = false;  // a list of prompts: the answer is a list
    bool return_tokens = false;
    int n_probs = 0;
    nlohmann::json settings;  // generation_settings
    std::vector<std::string> stop;  // the request's stop strings
    const Tokenizer* tokenizer = nullptr;
  };
  // One per prompt: its token ids (tokens_evaluated, and "prompt").
  CompletionGeneration(std::shared_ptr<openai::HttpExchange> exchange, Options options,
                       const std::vector<std::vector<int32_t>>& prompts);

  std::shared_ptr<grpc::ClientContext> call;  // set by StartChoices

  void Begin();
  void HandleMessage(const v1::GenerateResponse& message);
  void HandleEnd(const grpc::Status& status, int64_t retry_after_seconds);

  // GenerationSink (gRPC's threads).
  void OnMessage(const v1::GenerateResponse& message) override;
  void OnEnd(const grpc::Status& status, int64_t retry_after_seconds) override;
  bool ClientGone() const override { return gone_; }

 private:
  struct Choice {
    int prompt_tokens = 0;
    std::string prompt_text;
    std::string content;
    std::vector<int32_t> tokens;
    nlohmann::json probs = nlohmann::json::array();
    v1::GenerateResponse last;  // the final message (usage, timings, finish)
    bool done = false;
  };
  nlohmann::json Probs(const v1::GenerateResponse& message) const;
  nlohmann::json Final(int index, const Choice& c) const;
  std::optional<std::string> StopWord(const Choice& c) const;
  void Event(const nlohmann::json& payload);

  std::shared_ptr<openai::HttpExchange> exchange_;
  const Options options_;
  std::vector<Choice> choices_;
  bool ended_ = false;
  std::atomic<bool> gone_{false};
};

}  // namespace specline::llama_server
