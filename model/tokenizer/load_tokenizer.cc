// Tokenizer::Decode and the loader that picks a format from a path.
#include <filesystem>
#include <stdexcept>

#include "model/formats/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {

namespace fs = std::filesystem;

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += TokenBytes(prev, id);
    prev = id;
  }
  return out;
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, int32_t model_vocab_size) {
  fs::path p(path);
  if (fs::is_directory(p)) {
    // A model directory: HF's tokenizer.json first (it carries added tokens
    // and the pre-tokenizer), then SentencePiece, then llama2.c.
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer.bin"}) {
      if (fs::exists(p / name)) return LoadTokenizer((p / name).string(), model_vocab_size);
    }
    throw std::runtime_error(path + ": no tokenizer.json, tokenizer.model or tokenizer.bin");
  }
  const std::string ext = p.extension().string();
  if (ext == ".json") return LoadTokenizerJson(path);
  if (ext == ".model") return LoadSentencePieceModel(path);
  if (ext == ".bin") return LoadLlama2cTokenizer(path, model_vocab_size);
  if (ext == ".gguf") return LoadGgufTokenizer(*GgufFile::Open(path));
  throw std::runtime_error(path + ": cannot tell the tokenizer format from the file name");
}

}  // namespace specline
