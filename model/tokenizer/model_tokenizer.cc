#include "model/tokenizer/model_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/formats/gguf.h"

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

std::optional<ChatTemplate> ChatTemplateFor(const ModelSource& model) {
  std::string source;
  if (model.format() == ModelFormat::kGguf) {
    if (const GgufValue* v = model.gguf()->Find("tokenizer.chat_template")) {
      if (const std::string* s = v->AsString()) source = *s;
    }
  } else if (model.format() == ModelFormat::kHuggingFace) {
    std::ifstream in(fs::path(model.path()) / "tokenizer_config.json");
    if (in) {
      nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string()) {
        source = j["chat_template"].get<std::string>();
      }
    }
  }
  if (source.empty()) return std::nullopt;
  return ChatTemplate::FromJinja(source);
}

}  // namespace specline
