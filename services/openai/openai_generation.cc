#include "services/openai/openai_generation.h"

#include <nlohmann/json.hpp>

namespace specline::openai {

void OpenAiGeneration::Chunk(const std::string& payload) {
  exchange_->SendChunk("data: " + payload + "\n\n");
}

void OpenAiGeneration::Begin() {
  HoldExchange();
  if (!stream) return;
  exchange_->StartStream("text/event-stream");
  if (responses) {
    exchange_->SendChunk(responses->Opening());
    return;
  }
  // OpenAI opens each chat choice with a role-only chunk; echo comes before
  // a completion's text.
  for (size_t i = 0; i < choices.size(); ++i) {
    if (who.endpoint == Endpoint::kChatCompletions) Chunk(RoleChunk(who, static_cast<int>(i)));
    if (!echo.empty()) Chunk(TextChunk(who, static_cast<int>(i), echo[i / n]));
  }
}

void OpenAiGeneration::HandleMessage(const v1::GenerateResponse& message) {
  if (ended_) return;
  const int i = static_cast<int>(message.index());
  if (i < 0 || i >= static_cast<int>(choices.size())) return;
  ChoiceResult& c = choices[i];
  const bool last = message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  if (last) {
    c.finish = message.finish_reason();
    // n samples of one prompt count its tokens once.
    if (i % n == 0) {
      usage_.set_prompt_tokens(usage_.prompt_tokens() + message.usage().prompt_tokens());
      usage_.set_cached_tokens(usage_.cached_tokens() + message.usage().cached_tokens());
    }
    usage_.set_completion_tokens(usage_.completion_tokens() + message.usage().completion_tokens());
  }
  if (!stream) {
    if (!tools.empty()) tools[i]->Collect(message);
    else c.text += message.text();
    if (!logprobs.empty()) logprobs[i].Add(message);
    return;
  }
  if (!tools.empty()) {
    if (responses) {
      // An empty chunk would end the chunked body: only events are sent.
      const std::string events = responses->Parsed(tools[i]->Next(message));
      if (!events.empty()) exchange_->SendChunk(events);
      return;
    }
    for (const std::string& chunk : tools[i]->StreamChunks(who, i, message)) Chunk(chunk);
    return;
  }
  if (responses) {
    if (!message.text().empty()) exchange_->SendChunk(responses->Delta(message.text()));
    return;
  }
  const std::optional<nlohmann::json> lp =
      !logprobs.empty() && message.logprobs_size() > 0 ? std::optional(logprobs[i].Add(message))
                                                       : std::nullopt;
  // A message with tokens is a chunk even when its text is empty (a model
  // served without a tokenizer, or bytes of a character not complete yet):
  // clients see progress, and the stream's pace is the tokens'.
  if (!message.text().empty() || message.token_ids_size() > 0)
    Chunk(TextChunk(who, i, message.text(), lp ? &*lp : nullptr));
  if (last) Chunk(FinishChunk(who, i, c.finish));
}

void OpenAiGeneration::HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) {
  if (ended_) return;
  ended_ = true;
  const ApiError error = status.ok() ? ApiError() : EndError(who.endpoint, status, retry_after_seconds);
  if (stream) {
    if (responses) {
      exchange_->SendChunk(status.ok() ? responses->Closing(choices[0].finish, usage_)
                                       : responses->Failed(error));
    } else {
      if (!status.ok()) Chunk(ErrorBody(error));
      else if (include_usage) Chunk(UsageChunk(who, usage_));
      exchange_->SendChunk("data: [DONE]\n\n");
    }
    exchange_->EndStream();
    return;
  }
  if (!status.ok()) {
    // Not streamed: the status line is still ours to choose, so a limit
    // that said when to retry answers 429 with Retry-After.
    return exchange_->SendJson(static_cast<http::status>(error.http_status), ErrorBody(error),
                               error.retry_after_seconds);
  }
  SendWhole();
}

void OpenAiGeneration::SendWhole() {
  if (responses) {
    return exchange_->SendJson(http::status::ok, tools.empty() ? responses->Whole(choices[0].text, choices[0].finish, usage_)
                                                               : responses->Whole(tools[0]->Parsed(), choices[0].finish, usage_));
  }
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!echo.empty()) choices[i].text = echo[i / n] + choices[i].text;
    if (!logprobs.empty()) choices[i].logprobs = logprobs[i].Whole();
  }
  if (tools.empty()) return exchange_->SendJson(http::status::ok, FullResponse(who, choices, usage_));
  // Tool calls: each choice's collected answer parsed into calls.
  std::vector<tool_calls::ParsedText> parsed(choices.size());
  for (size_t i = 0; i < choices.size(); ++i) {
    parsed[i] = tools[i]->Parsed();
    choices[i].text = parsed[i].content;
  }
  nlohmann::json whole = nlohmann::json::parse(FullResponse(who, choices, usage_));
  for (size_t i = 0; i < choices.size(); ++i) AddToolCalls(parsed[i], choices[i].finish, whole["choices"][i]);
  exchange_->SendJson(http::status::ok,
                      whole.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace specline::openai
