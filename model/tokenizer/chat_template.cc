#include "model/tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "model/jinja/jinja.h"
#include "model/tokenizer/chat_template_sources.h"

namespace specline {
namespace {

// The engine's messages start "chat template ..."; ours name the template.
std::string WithoutEnginePrefix(const std::string& message, std::string_view prefix) {
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

absl::StatusOr<std::shared_ptr<const jinja::Template>> Compile(std::string_view source,
                                                               const std::string& origin) {
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template (", origin, ") does not parse: ",
                     WithoutEnginePrefix(std::string(t.status().message()), "chat template ")));
  }
  return std::make_shared<const jinja::Template>(*std::move(t));
}

}  // namespace

nlohmann::ordered_json ChatMessagesJson(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string origin,
                                                 std::string bos_token, std::string eos_token) {
  auto main = Compile(source, origin);
  if (!main.ok()) return main.status();
  ChatTemplate t;
  t.main_ = *std::move(main);
  t.main_source_ = std::string(source);
  t.origin_ = std::move(origin);
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  return t;
}

absl::Status ChatTemplate::AddToolUseVariant(std::string_view source) {
  auto tool_use = Compile(source, origin_ + ", tool_use variant");
  if (!tool_use.ok()) return tool_use.status();
  tool_use_ = *std::move(tool_use);
  tool_use_source_ = std::string(source);
  return absl::OkStatus();
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromFile(const std::string& path,
                                                    std::string bos_token,
                                                    std::string eos_token) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read chat template file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ChatTemplateSources> sources = ChatTemplateSourcesFromFileText(text.str(), path);
  if (!sources.ok()) return sources.status();
  absl::StatusOr<ChatTemplate> t =
      Parse(sources->main, path, std::move(bos_token), std::move(eos_token));
  if (!t.ok() || sources->tool_use.empty()) return t;
  if (absl::Status s = t->AddToolUseVariant(sources->tool_use); !s.ok()) return s;
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                                const ChatRenderOptions& options) const {
  // The variables transformers' apply_chat_template passes: tools and
  // documents are None when absent (defined, but none), then the special
  // tokens' texts.
  nlohmann::ordered_json context = {
      {"messages", messages},
      {"tools", options.tools},
      {"documents", nullptr},
      {"add_generation_prompt", options.add_generation_prompt},
      {"bos_token", bos_token_},
      {"eos_token", eos_token_},
  };
  if (options.extra.is_object()) {
    for (const auto& [name, value] : options.extra.items()) {
      if (context.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chat_template_kwargs may not set '", name, "': the server sets it"));
      }
      context[name] = value;
    }
  }
  const bool has_tools = options.tools.is_array() && !options.tools.empty();
  const jinja::Template& program = has_tools && tool_use_ ? *tool_use_ : *main_;
  absl::StatusOr<std::string> text = program.Render(context);
  if (!text.ok()) {
    // The template's own raise_exception ("Conversation roles must
    // alternate user/assistant/...") is its verdict on the conversation.
    constexpr std::string_view kRaised = "chat template raised: ";
    const std::string message(text.status().message());
    const bool raised = message.rfind(kRaised, 0) == 0;
    return absl::Status(text.status().code(),
                        absl::StrCat("chat template (", origin_, ") ",
                                     raised ? "refused the conversation: " : "failed: ",
                                     WithoutEnginePrefix(message, raised ? kRaised : "chat template ")));
  }
  return text;
}

}  // namespace specline
