// One generation of llama-server's /completion or /infill on its way to the
// client, in llama-server's native shapes: streamed, a `data: {...}` event
// per message ({"content", "tokens", "stop": false, ...}) and a final one
// with "stop": true, stop_type, timings and generation_settings (no
// [DONE]); not streamed, one object (a list of them for a list of
// prompts). Its messages are handled on the exchange's strand
// (services/openai/http_generation.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "services/openai/http_generation.h"

namespace specline::llama_server {

class CompletionGeneration final : public openai::HttpGeneration {
 public:
  struct Options {
    std::string id;     // the request id, for the logs
    std::string model;  // the served model's name
    bool stream = false;
    bool several = false;  // a list of prompts: the answer is a list
    bool return_tokens = false;
    int n_probs = 0;
    nlohmann::json settings;  // generation_settings
    const Tokenizer* tokenizer = nullptr;
  };
  // One per prompt: its token ids (tokens_evaluated, and "prompt").
  CompletionGeneration(std::shared_ptr<openai::HttpExchange> exchange, Options options,
                       const std::vector<std::vector<int32_t>>& prompts);

  // Holds the exchange and, streamed, sends the header.
  void Begin();
  void HandleMessage(const v1::GenerateResponse& message) override;
  void HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) override;

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
  void Event(const nlohmann::json& payload);

  const Options options_;
  std::vector<Choice> choices_;
};

}  // namespace specline::llama_server
