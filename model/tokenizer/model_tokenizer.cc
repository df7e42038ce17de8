#include "model/tokenizer/model_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/formats/gguf.h"
#include "model/tokenizer/chat_template_sources.h"

namespace fs = std::filesystem;

namespace specline {

std::unique_ptr<Tokenizer> OpenTokenizerFor(const ModelSource& model,
                                            const std::string& explicit_path) {
  const int32_t vocab = model.config().vocab_size;
  if (!explicit_path.empty()) return LoadTokenizer(explicit_path, vocab);
  switch (model.format()) {
    case ModelFormat::kGguf:
      return LoadGgufTokenizer(*model.gguf());
    case ModelFormat::kHuggingFace:
      return LoadTokenizer(model.path(), vocab);
    case ModelFormat::kLlama2c: {
      const fs::path dir = fs::path(model.path()).parent_path();
      const std::string v = std::to_string(vocab);
      for (const char* name : {"tokenizer.bin", "tokenizer.model"}) {
        if (fs::exists(dir / name)) return LoadTokenizer((dir / name).string(), vocab);
      }
      for (const std::string& name : {"tok" + v + ".bin", "tok" + v + ".model"}) {
        if (fs::exists(dir / name)) return LoadTokenizer((dir / name).string(), vocab);
      }
      throw std::runtime_error("no tokenizer for " + model.path() + ": looked for tokenizer.bin, " +
                               "tokenizer.model, tok" + v + ".bin and tok" + v + ".model in " +
                               dir.string() + "; pass --tokenizer");
    }
  }
  throw std::runtime_error("unknown model format");
}

namespace {

// The template's sources as the model ships them, empty when it has none.
absl::StatusOr<ChatTemplateSources> ModelChatTemplateSources(const ModelSource& model) {
  ChatTemplateSources out;
  if (model.format() == ModelFormat::kGguf) {
    auto key = [&](const char* name) -> std::string {
      const GgufValue* v = model.gguf()->Find(name);
      const std::string* s = v ? v->AsString() : nullptr;
      return s ? *s : std::string();
    };
    out.main = key("tokenizer.chat_template");
    out.tool_use = key("tokenizer.chat_template.tool_use");
    return out;
  }
  if (model.format() != ModelFormat::kHuggingFace) return out;
  // transformers 4.43+ may save the template beside tokenizer_config.json.
  const fs::path dir(model.path());
  for (const char* name : {"chat_template.jinja", "chat_template.json"}) {
    std::ifstream in(dir / name, std::ios::binary);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    return ChatTemplateSourcesFromFileText(text.str(), (dir / name).string());
  }
  std::ifstream in(dir / "tokenizer_config.json");
  if (!in) return out;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("chat_template")) return out;
  return ChatTemplateSourcesFromJson(j["chat_template"],
                                     (dir / "tokenizer_config.json").string());
}

// The texts a template prints for bos_token and eos_token: the pieces as
// the vocabulary stores them ("<s>", "<|im_end|>"), as transformers has them.
std::string BosText(const Tokenizer* t) {
  return t && t->bos_id() >= 0 ? t->Piece(t->bos_id()) : std::string();
}
std::string EosText(const Tokenizer* t) {
  return t && t->eos_id() >= 0 ? t->Piece(t->eos_id()) : std::string();
}

}  // namespace

absl::StatusOr<std::optional<ChatTemplate>> ChatTemplateFor(const ModelSource& model,
                                                            const Tokenizer* tokenizer) {
  absl::StatusOr<ChatTemplateSources> sources = ModelChatTemplateSources(model);
  if (!sources.ok()) return sources.status();
  if (sources->main.empty()) return std::optional<ChatTemplate>();
  const std::string origin = model.format() == ModelFormat::kGguf
                                 ? "the model's tokenizer.chat_template"
                                 : "the model's chat_template";
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Parse(sources->main, origin, BosText(tokenizer), EosText(tokenizer));
  if (!t.ok()) return t.status();
  if (!sources->tool_use.empty()) {
    if (absl::Status s = t->AddToolUseVariant(sources->tool_use); !s.ok()) return s;
  }
  return std::optional<ChatTemplate>(*std::move(t));
}

absl::StatusOr<ChatTemplate> ChatTemplateFromFile(const std::string& path,
                                                  const Tokenizer* tokenizer) {
  return ChatTemplate::FromFile(path, BosText(tokenizer), EosText(tokenizer));
}

}  // namespace specline
