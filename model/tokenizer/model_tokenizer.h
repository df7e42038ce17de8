// Finds the tokenizer and chat template that belong to a model.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/formats/model_source.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {

// `explicit_path` wins when set. Otherwise: the GGUF's embedded vocabulary,
// tokenizer.json in a Hugging Face directory, or for a llama2.c checkpoint a
// tokenizer.bin / tok<vocab>.bin / tokenizer.model / tok<vocab>.model next to
// it. Throws std::runtime_error saying where it looked.
std::unique_ptr<Tokenizer> OpenTokenizerFor(const ModelSource& model,
                                            const std::string& explicit_path = "");

// The model's own chat template (GGUF tokenizer.chat_template, or
// tokenizer_config.json's chat_template), when it has one.
std::optional<ChatTemplate> ChatTemplateFor(const ModelSource& model);

}  // namespace specline
