// One generation of the OpenAI API (completions, chat, responses) on its
// way to the client: each choice's state, turned into SSE chunks as the
// messages come (streamed) or into one body at the end (not streamed), with
// echo, logprobs and tool calls. It is the generation's sink: messages
// arrive on gRPC's threads and are handled on the exchange's strand, so a
// generation never touches the connection from another thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "services/openai/http_generation.h"
#include "services/openai/logprobs_json.h"
#include "services/openai/openai_response.h"
#include "services/openai/responses_api.h"
#include "services/openai/tool_call_response.h"

namespace specline::openai {

class OpenAiGeneration final : public HttpGeneration {
 public:
  OpenAiGeneration(std::shared_ptr<HttpExchange> exchange, ResponseIdentity identity)
      : HttpGeneration(std::move(exchange), identity.id), who(std::move(identity)) {}

  // What the answer looks like, set before the generation starts.
  const ResponseIdentity who;
  bool stream = false;
  bool include_usage = false;
  int n = 1;                          // samples per prompt: choice i is prompt i / n's
  std::vector<ChoiceResult> choices;  // non-streamed: each choice's whole text
  std::vector<std::string> echo;      // completions' echo: each prompt's text
  std::optional<ResponsesRender> responses;  // POST /v1/responses
  std::vector<LogprobsJson> logprobs;        // one per choice when the request asked for them
  std::vector<std::unique_ptr<ToolCallResponder>> tools;  // one per choice when parsed for calls

  // The generation started: holds the exchange (the client leaving cancels
  // the call) and, streamed, sends the header and the opening chunks.
  void Begin();
  // On the strand (Begin's caller, or posted from the sink's calls).
  void HandleMessage(const v1::GenerateResponse& message) override;
  void HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) override;

 private:
  void Chunk(const std::string& payload);  // one SSE "data:" event
  void SendWhole();

  v1::Usage usage_;  // summed over the choices
};

}  // namespace specline::openai
