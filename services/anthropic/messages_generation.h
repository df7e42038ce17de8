// One Messages API generation on its way to the client: streamed as
// Anthropic's events (messages_response.h), or collected into one message.
// When the request had tools, the model's text goes through the served
// model's tool-call parser (the OpenAI API's ToolCallResponder), and its
// deltas become text and tool_use blocks. Its messages are handled on the
// exchange's strand (services/openai/http_generation.h).
#pragma once

#include <memory>
#include <string>

#include "services/anthropic/messages_response.h"
#include "services/openai/http_generation.h"
#include "services/openai/tool_call_response.h"

namespace specline::anthropic {

class MessagesGeneration final : public openai::HttpGeneration {
 public:
  MessagesGeneration(std::shared_ptr<openai::HttpExchange> exchange, std::string id, std::string model,
                     bool stream)
      : HttpGeneration(std::move(exchange), id), model_(model), stream_(stream),
        events_(std::move(id), std::move(model)) {}

  std::unique_ptr<openai::ToolCallResponder> tools;  // set when the request has tools

  // Holds the exchange and, streamed, sends the header.
  void Begin();

  void HandleMessage(const v1::GenerateResponse& message) override;
  void HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) override;

 private:
  // A streamed message's text and tool-call deltas as events.
  std::string StreamEvents(const v1::GenerateResponse& message);

  const std::string model_;
  const bool stream_;
  MessageEvents events_;
  bool started_ = false;  // message_start sent
  std::string text_;      // not streamed, without tools: the answer
  StopReason stop_;
  v1::Usage usage_;
};

}  // namespace specline::anthropic
