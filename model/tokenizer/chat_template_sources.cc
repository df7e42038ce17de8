#include "model/tokenizer/chat_template_sources.h"

#include "absl/strings/str_cat.h"

namespace specline {

absl::StatusOr<ChatTemplateSources> ChatTemplateSourcesFromJson(const nlohmann::json& value,
                                                                const std::string& origin) {
  ChatTemplateSources out;
  if (value.is_string()) {
    out.main = value.get<std::string>();
    return out;
  }
  if (!value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": chat_template must be a string or a list of named templates"));
  }
  std::string first;
  for (const nlohmann::json& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": each named chat_template needs string fields name and template"));
    }
    const std::string name = entry["name"].get<std::string>();
    const std::string text = entry["template"].get<std::string>();
    if (first.empty()) first = text;
    if (name == "default") out.main = text;
    if (name == "tool_use") out.tool_use = text;
  }
  if (out.main.empty()) out.main = first;
  return out;
}

absl::StatusOr<ChatTemplateSources> ChatTemplateSourcesFromFileText(const std::string& text,
                                                                    const std::string& path) {
  // Only an object is taken for JSON: a Jinja source never parses as one.
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (!j.contains("chat_template")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is JSON without a \"chat_template\" entry"));
    }
    return ChatTemplateSourcesFromJson(j["chat_template"], path);
  }
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  ChatTemplateSources out;
  out.main = text;
  return out;
}

}  // namespace specline
