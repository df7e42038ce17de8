// A model's chat template: the Jinja program, shipped with the model, that
// turns a conversation into the prompt text it was trained on. It runs in
// specline's Jinja engine (model/jinja), set up as transformers'
// apply_chat_template sets jinja2 up, so a prompt is byte-for-byte what
// transformers and llama-server send for the same conversation.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specline {

namespace jinja {
class Template;
}

// One chat turn, for callers that build conversations in C++ (the CLI,
// tests). The OpenAI and gRPC APIs hand messages over as JSON.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
};

nlohmann::ordered_json ChatMessagesJson(const std::vector<ChatMessage>& messages);

// What a render takes besides the messages.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // OpenAI-shaped tool definitions; null when the request has none (the
  // template then sees `tools` undefined, as transformers passes None).
  nlohmann::ordered_json tools;
  // Further variables (vLLM's chat_template_kwargs: {"enable_thinking":
  // false}); an object or null. They may not rename the ones above.
  nlohmann::ordered_json extra;
};

class ChatTemplate {
 public:
  // Parses `source`. `origin` says where it came from, for every error
  // ("the model's tokenizer.chat_template", a file path). bos_token and
  // eos_token are the texts the template's `bos_token` / `eos_token` print.
  // InvalidArgument naming origin and the syntax error.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source, std::string origin,
                                            std::string bos_token, std::string eos_token);

  // Reads and parses a template file: the Jinja text itself, or a
  // tokenizer_config.json / chat_template.json carrying "chat_template".
  static absl::StatusOr<ChatTemplate> FromFile(const std::string& path, std::string bos_token,
                                               std::string eos_token);

  // Adds the variant used when a request carries tools (GGUF
  // "tokenizer.chat_template.tool_use", tokenizer_config's template named
  // "tool_use"), as transformers and llama-server pick it.
  absl::Status AddToolUseVariant(std::string_view source);

  // The prompt text for `messages` (a JSON list of message objects). A
  // template error (including the template's own raise_exception, such as
  // "Conversation roles must alternate") is InvalidArgument naming it; the
  // caller answers 400. Encode the result with add_bos = false and
  // parse_special = true: the template writes the BOS the model wants.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages,
                                    const ChatRenderOptions& options = {}) const;
  absl::StatusOr<std::string> Apply(const std::vector<ChatMessage>& messages,
                                    const ChatRenderOptions& options = {}) const {
    return Apply(ChatMessagesJson(messages), options);
  }

  // What bos_token and eos_token print from now on.
  void set_special_texts(std::string bos_token, std::string eos_token) {
    bos_token_ = std::move(bos_token);
    eos_token_ = std::move(eos_token);
  }

  const std::string& origin() const { return origin_; }
  // The main template's Jinja source (llama-server's /props chat_template).
  const std::string& source() const { return main_source_; }
  // The Jinja source a request with tools renders through (the tool_use
  // variant when there is one): the gateway reads its tool-call syntax and
  // whether it renders `tools` at all (services/tool_calls).
  const std::string& tools_source() const {
    return tool_use_source_.empty() ? main_source_ : tool_use_source_;
  }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  std::shared_ptr<const jinja::Template> main_, tool_use_;
  std::string origin_, bos_token_, eos_token_;
  std::string main_source_, tool_use_source_;
};

}  // namespace specline
