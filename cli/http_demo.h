// `specline serve --demo-prompt` through the router in front of replicas:
// the streamed OpenAI completion any client would send (POST
// /v1/completions, "stream": true), printed as it arrives, timed on the
// client side. (One pipeline alone takes the gRPC path, cli/stream_client.h.)
#pragma once

#include <string>

#include "specline/v1/generation.pb.h"

namespace specline::cli {

// Streams `request` (a text prompt; its sampling fields, max_tokens and
// policy) to the OpenAI API at 127.0.0.1:`port`, writing the text to stdout
// and a one-line summary (tokens, TTFT, TPOT, ITL, tok/s) to stderr after
// `label`. Returns 0, or 1 after printing why the stream failed. Throws
// std::invalid_argument for a chat or token-id prompt.
int StreamDemoOverHttp(int port, const v1::GenerateRequest& request, const std::string& label);

}  // namespace specline::cli
