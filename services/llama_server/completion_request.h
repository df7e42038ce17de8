// llama-server's native completion request (POST /completion, and /infill
// on top of it) turned into the public GenerateRequest the shared
// validation and scheduler take, with llama-server's field names and
// defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, n_predict -1
// = as many as fit). Fields specline does not implement are refused with a
// 400 naming them when they would change the output, or accepted and
// listed in docs/llama_server_api.md when they only tune llama-server's
// own machinery (cache_prompt, id_slot, n_keep, samplers' order, ...).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "services/openai/openai_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::llama_server {

struct CompletionRequest {
  // Everything but the prompt: sampling, n_predict, stop, grammar, n_probs.
  v1::GenerateRequest request;
  // One token list per prompt; `several` when the body sent a list of
  // prompts (the answer is then a list too).
  std::vector<std::vector<int32_t>> prompts;
  bool several = false;
  bool stream = false;
  bool return_tokens = false;
  bool n_predict_zero = false;  // evaluate the prompt, generate nothing
  int n_probs = 0;
  // What generation_settings reports: the fields as they were applied.
  nlohmann::json settings;
};

// The body's fields other than the prompt. The error is a 400 in the
// shared ApiError shape naming the field.
std::optional<openai::ApiError> ReadCompletionFields(const nlohmann::json& body,
                                                     CompletionRequest* out);

// The prompt (a string, token ids, a mix, or a list of those) as token
// lists: strings with BOS when the model adds one, special tokens parsed,
// as llama-server tokenizes them.
std::optional<openai::ApiError> ReadCompletionPrompt(const nlohmann::json& prompt,
                                                     const Tokenizer& tokenizer,
                                                     CompletionRequest* out);

}  // namespace specline::llama_server
