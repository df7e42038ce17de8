// Plain autoregressive generation over a LocalPipeline: chunked prefill,
// then one token per step. This is the baseline every speculative policy is
// checked against token for token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/runtime/local_pipeline.h"
#include "model/runtime/sampler.h"

namespace specline {

struct GenerationOptions {
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one
  bool ignore_eos = false;        // disables stop_ids
  int prefill_chunk = 256;        // prompt positions per forward call
  // Coupled sampling (docs/ptp.md): token t is drawn at PtpUniform(seed, t)
  // instead of from a sequential stream: what a PTP request must equal.
  bool coupled = false;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated tokens (a stop token included)
  std::string finish_reason;    // "stop", "length", "abort"
  int prompt_tokens = 0;
  double prefill_seconds = 0;  // prompt forward + first token
  double decode_seconds = 0;   // the remaining tokens
};

// Generates for sequence `seq` (released at the end). `on_token` is called
// for each token as it is produced; returning false aborts.
absl::StatusOr<GenerationResult> Generate(LocalPipeline& model, uint64_t seq,
                                          std::span<const int32_t> prompt,
                                          const GenerationOptions& options,
                                          const std::function<bool(int32_t)>& on_token = {});

}  // namespace specline
