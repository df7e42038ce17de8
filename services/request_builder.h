// Turns a public GenerateRequest into the scheduler's SubmitRequest:
// validates every field (INVALID_ARGUMENT naming it), tokenizes the prompt,
// fills defaults and clamps max_tokens to the context. Pure: no I/O, so
// a malformed request changes nothing anywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "services/llama_server/fim_tokens.h"
#include "services/tool_calls/tool_call_syntax.h"
#include "specline/internal/scheduler.pb.h"
#include "specline/v1/generation.pb.h"

namespace specline {

// What the gateway knows about the model it serves.
struct ServedModel {
  const Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  std::optional<ChatTemplate> chat_template;
  // Why there is no template, for the 400 a chat request gets ("the model
  // carries no chat template; start the gateway with --chat-template FILE").
  std::string no_chat_template_reason;
  int32_t vocab_size = 0;
  int32_t context_length = 0;
  int32_t default_max_tokens = 256;
  int32_t max_prompt_tokens = 0;  // 0: the context length minus one
  // Whether the template renders tools, and the syntax its calls come in.
  tool_calls::ToolCallSupport tool_calls;
  // Fill-in-the-middle tokens (llama-server's /infill); none: not usable.
  FimTokens fim;
  // The served file's name without its folder (llama-server's /props
  // model_path; folders are not told to clients).
  std::string model_file;
};

// Limits on stop strings: matching cost grows with both.
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopStringBytes = 256;
inline constexpr int kMaxStopTokenIds = 64;
// cache_salt is hashed into every prompt block's key: bounded like a stop string.
inline constexpr int kMaxCacheSaltBytes = 256;
// n (choices per request): each is a stream of its own in the scheduler.
inline constexpr int kMaxChoices = 16;

struct PreparedRequest {
  internal::SubmitRequest submit;  // request_id left for the caller
  std::vector<std::string> stop_strings;
  int32_t detok_prev = -1;  // the prompt's last token, for the detokenizer
  // The request's cache_salt: the gateway turns it and the principal into
  // submit.cache_scope (services/cache_scopes.h).
  std::string cache_salt;
  // Detokenization (generation.proto): special tokens' text kept, and the
  // stop string (or stop token's text) kept at the end.
  bool keep_special_tokens = false;
  bool include_stop_str_in_output = false;
};

// The text a conversation rendered without the generation prompt is cut to
// so that the model continues its last message `final_content` (vLLM's and
// transformers' continue_final_message): right after the last occurrence of
// that content, its leading and trailing whitespace aside as transformers
// does it. InvalidArgument when the template dropped the content.
absl::StatusOr<std::string> CutAfterFinalMessage(const std::string& rendered,
                                                 const std::string& final_content);

// Whether `chat` may continue its final message (continue_final_message):
// no generation prompt after it, and an assistant's turn of text to go on
// with. OK when it does not ask to. The one check of it, for every API
// (the OpenAI API runs it while parsing, RenderChat again).
absl::Status CheckContinuation(const v1::ChatMessages& chat);

// The prompt text the model's chat template makes of `chat` (what
// /apply-template answers). INVALID_ARGUMENT naming the template's error.
absl::StatusOr<std::string> RenderChat(const v1::ChatMessages& chat, const ServedModel& model);

// How a request's limits are read; the gRPC API's and the OpenAI API's
// differ where their public contracts do.
struct RequestRules {
  // KV positions a stage holds (the scheduler's stats; 0: not known yet).
  // The context a request can use is the smaller of this and the model's.
  int64_t kv_capacity_tokens = 0;
  // OpenAI's contract: an unset max_tokens (0) means "up to what fits"
  // (context - prompt), and a max_tokens that does not fit is refused
  // (context_length_exceeded). The gRPC API's: 0 is --default-max-tokens,
  // and either is clamped to what fits. OpenAI's completions also take an
  // empty prompt (the BOS token alone); the gRPC API refuses it.
  bool openai = false;
};

// The error code (absl payload kErrorCodePayload) of a request whose prompt,
// or prompt + max_tokens, does not fit the context: the OpenAI API answers
// it as `code: "context_length_exceeded"`.
inline constexpr char kErrorCodePayload[] = "specline.dev/error-code";
inline constexpr char kContextLengthExceeded[] = "context_length_exceeded";

// The context a request can use under `rules` (positions, prompt included).
int32_t UsableContext(const ServedModel& model, const RequestRules& rules);

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const ServedModel& model,
                                               const RequestRules& rules = {});

}  // namespace specline
