#include "services/anthropic/messages_generation.h"

#include "services/anthropic/anthropic_errors.h"
#include "services/openai/openai_response.h"

namespace specline::anthropic {

void MessagesGeneration::Begin() {
  HoldExchange();
  if (stream_) exchange_->StartStream("text/event-stream");
}

std::string MessagesGeneration::StreamEvents(const v1::GenerateResponse& message) {
  if (!tools) return events_.Text(message.text());
  // The parser's content, then its calls as deltas: the first names a
  // call (a tool_use block opens), the next carry pieces of its input.
  const tool_calls::ParsedText parsed = tools->Next(message);
  std::string out = events_.Text(parsed.content);
  for (const tool_calls::CallDelta& d : parsed.deltas) {
    if (!d.id.empty()) {
      stop_.made_calls = true;
      out += events_.ToolUse(d.id, d.name);
    }
    out += events_.InputJson(d.arguments);
  }
  return out;
}

void MessagesGeneration::HandleMessage(const v1::GenerateResponse& message) {
  if (ended_) return;
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    stop_.finish = message.finish_reason();
    stop_.stop_string = message.stop_string();
    usage_ = message.usage();
  }
  if (!stream_) {
    if (tools) tools->Collect(message);
    else text_ += message.text();
    return;
  }
  std::string out;
  if (!started_) {
    // The first message carries the prompt's usage (generation.proto).
    started_ = true;
    out = events_.Start(message.usage());
  }
  out += StreamEvents(message);
  if (!out.empty()) exchange_->SendChunk(std::move(out));
}

void MessagesGeneration::HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) {
  if (ended_) return;
  ended_ = true;
  const openai::ApiError error =
      status.ok() ? openai::ApiError() : EndError(openai::Endpoint::kChatCompletions, status, retry_after_seconds);
  if (stream_) {
    std::string out;
    if (!status.ok()) {
      out = MessageEvents::Error(error);
    } else {
      if (!started_) out = events_.Start(usage_);
      out += events_.Finish(stop_, usage_);
    }
    exchange_->SendChunk(std::move(out));
    exchange_->EndStream();
    return;
  }
  if (!status.ok()) {
    return exchange_->SendJson(static_cast<openai::http::status>(error.http_status), anthropic::ErrorBody(error),
                               error.retry_after_seconds);
  }
  tool_calls::ParsedText answer;
  if (tools) {
    answer = tools->Parsed();
    stop_.made_calls = !answer.calls.empty();
  } else {
    answer.content = std::move(text_);
  }
  exchange_->SendJson(openai::http::status::ok, WholeMessage(id_, model_, answer, stop_, usage_));
}

}  // namespace specline::anthropic
