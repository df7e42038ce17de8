// Streams one Generate call and times it on the client side: TTFT, TPOT,
// ITL (per token: the gap before a message divided by its tokens, as
// genai-perf does) and tokens/s. Shared by `specline client` and the
// launcher's --demo-prompt.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>

#include "specline/v1/generation.grpc.pb.h"

namespace specline::cli {

struct StreamResult {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> tokens;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
  v1::Timings server_timings;
  v1::DecodingPolicy policy = v1::DECODING_POLICY_UNSPECIFIED;
  v1::SpecDecodeStats spec_decode;
  double ttft = 0;  // client-side, seconds
  double e2e = 0;
  double tpot = 0;               // (e2e - ttft) / (tokens - 1)
  std::vector<double> itl;       // one entry per token after the first message
};

struct StreamOptions {
  std::string bearer_token;  // sent as "authorization: Bearer ..." when set
  double timeout_seconds = 0;  // 0 = no deadline
};

StreamResult StreamGenerate(const std::shared_ptr<grpc::Channel>& channel,
                            const v1::GenerateRequest& request, const StreamOptions& options,
                            const std::function<void(const std::string&)>& on_text);

// "TTFT 12.3 ms, TPOT 4.56 ms, ITL p50 4.5 ms p99 6.0 ms, 219.3 tok/s (N tokens, finish)"
std::string FormatStats(const StreamResult& r);

}  // namespace specline::cli
