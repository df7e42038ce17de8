// A SendFn for any OpenAI-compatible server (specline's HTTP API,
// llama-server, vLLM, ...): POST /v1/completions with "stream": true and
// stream_options.include_usage, every SSE event timestamped on receipt. The
// same runner, statistics and reports as the gRPC sender, so one tool
// measures specline and its peers alike.
//
// Token counts: an SSE chunk carries text, not token ids. Each chunk with
// text is one message (its gap is one ITL sample, as for a gRPC message);
// the request's token count is the usage chunk's completion_tokens, exact
// whatever the chunking, and tokens the chunks do not account for are
// credited to the last message.
#pragma once

#include <functional>
#include <string>

#include "loadtest/grpc_client.h"
#include "loadtest/runner.h"

namespace specline::loadtest {

struct OpenAiTarget {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;  // sent as "model" when set
  // Each chunk's text as it arrives (`specline serve --demo-prompt` prints
  // it); unset = not kept.
  std::function<void(const std::string&)> on_text;
};

SendFn OpenAiSender(OpenAiTarget target, ClientOptions options);

// "host:port" into a target; throws on a malformed address.
OpenAiTarget ParseOpenAiAddress(const std::string& addr);

}  // namespace specline::loadtest
