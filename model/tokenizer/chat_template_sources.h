// Where a model keeps its chat template, and how a template file is read:
// the Jinja text itself, or JSON carrying "chat_template" as a string or as
// a list of named templates (tokenizer_config.json, chat_template.json).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace specline {

struct ChatTemplateSources {
  std::string main;      // empty: the model has none
  std::string tool_use;  // the variant for requests with tools; may be empty
};

// `value` is a "chat_template" entry: a string, or [{"name", "template"}]
// with "default" (else the first) as main and "tool_use" as the variant.
absl::StatusOr<ChatTemplateSources> ChatTemplateSourcesFromJson(const nlohmann::json& value,
                                                                const std::string& origin);

// A file's text: JSON with "chat_template", else the Jinja source itself.
absl::StatusOr<ChatTemplateSources> ChatTemplateSourcesFromFileText(const std::string& text,
                                                                    const std::string& path);

}  // namespace specline
