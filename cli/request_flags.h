// The prompt and sampling flags shared by `specline client` and
// `specline serve --demo-prompt`, turned into a GenerateRequest.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "specline/v1/generation.pb.h"

namespace specline::cli {

// Option names (take a value) and flags (no value) the builder reads.
extern const std::vector<std::string> kRequestOptions;
extern const std::vector<std::string> kRequestFlags;
extern const char kRequestUsage[];

// prompt_option: the option holding the prompt text ("prompt" or "demo-prompt").
v1::GenerateRequest RequestFromArgs(const Args& args, const std::string& prompt_option);

// "1,2,3" -> {1, 2, 3}; throws std::invalid_argument naming the option.
std::vector<int32_t> ParseIdList(const std::string& option, const std::string& text);

}  // namespace specline::cli
