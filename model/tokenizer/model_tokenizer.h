// Finds the tokenizer and chat template that belong to a model.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/formats/model_source.h"
#include "absl/status/statusor.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {

// `explicit_path` wins when set. Otherwise: the GGUF's embedded vocabulary,
// tokenizer.json in a Hugging Face directory, or for a llama2.c checkpoint a
// tokenizer.bin / tok<vocab>.bin / tokenizer.model / tok<vocab>.model next to
// it. Throws std::runtime_error saying where it looked.
std::unique_ptr<Tokenizer> OpenTokenizerFor(const ModelSource& model,
                                            const std::string& explicit_path = "");

// The model's own chat template (GGUF tokenizer.chat_template and its
// .tool_use variant; in a Hugging Face directory chat_template.jinja,
// chat_template.json or tokenizer_config.json's chat_template), with the
// tokenizer's BOS and EOS texts. nullopt when the model has none;
// InvalidArgument when it has one that does not parse.
absl::StatusOr<std::optional<ChatTemplate>> ChatTemplateFor(const ModelSource& model,
                                                            const Tokenizer* tokenizer);

// A template file given by the operator (--chat-template FILE), with the
// tokenizer's BOS and EOS texts ("" without a tokenizer).
absl::StatusOr<ChatTemplate> ChatTemplateFromFile(const std::string& path,
                                                  const Tokenizer* tokenizer);

}  // namespace specline
