// What the load tester sends: prompts from a file (plain lines or JSONL) or
// synthetic token-id prompts of a chosen length distribution, and the
// GenerateRequest built from one prompt and the sampling flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "specline/v1/generation.pb.h"

namespace specline::loadtest {

struct WorkItem {
  std::string text;           // text prompt, or
  std::vector<int32_t> ids;   // token-id prompt (synthetic)
  int max_tokens = 0;         // 0 = the server's default
  bool ignore_eos = false;    // synthetic prompts run to max_tokens exactly
};

// One prompt per line; a line starting with '{' is JSON with "prompt" and
// optionally "max_tokens" (otherwise `default_max_tokens`). Empty lines are
// skipped. Throws on an unreadable file, bad JSON or no prompts.
std::vector<WorkItem> LoadPrompts(const std::string& path, int default_max_tokens);

struct SyntheticOptions {
  int input_len = 32;
  int output_len = 16;
  std::string dist = "fixed";  // fixed | uniform
  double range_ratio = 0.5;    // uniform: len in [len*(1-r), len*(1+r)]
  int vocab_size = 256;        // ids drawn from [3, vocab_size)
  uint64_t seed = 0;
};
std::vector<WorkItem> SyntheticPrompts(int count, const SyntheticOptions& options);

struct RequestOptions {
  std::optional<float> temperature, top_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  v1::DecodingPolicy policy = v1::DECODING_POLICY_UNSPECIFIED;
};

// "ar", "ppsd", "spd" (or "" for the server's default); throws otherwise.
v1::DecodingPolicy ParsePolicy(const std::string& name);

v1::GenerateRequest BuildRequest(const WorkItem& item, const RequestOptions& options,
                                 const std::string& request_id);

}  // namespace specline::loadtest
