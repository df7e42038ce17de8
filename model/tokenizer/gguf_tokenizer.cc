// Builds a tokenizer from the tokenizer.ggml.* metadata llama.cpp writes:
// model "llama" is a SentencePiece vocabulary (tokens, scores, token_type),
// model "gpt2" a byte-level BPE one (tokens, merges, token_type, pre).
#include <stdexcept>

#include "model/formats/gguf.h"
#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {
namespace {

const GgufValue::Array& RequireArray(const GgufFile& gguf, const std::string& key) {
  const GgufValue* v = gguf.Find(key);
  const GgufValue::Array* a = v ? v->AsArray() : nullptr;
  if (!a) throw std::runtime_error(gguf.path() + ": missing array metadata " + key);
  return *a;
}

std::string String(const GgufValue& v, const GgufFile& gguf, const std::string& key) {
  const std::string* s = v.AsString();
  if (!s) throw std::runtime_error(gguf.path() + ": " + key + " holds a non-string");
  return *s;
}

int32_t OptionalId(const GgufFile& gguf, const std::string& key) {
  const GgufValue* v = gguf.Find(key);
  if (!v) return -1;
  auto id = v->AsInt();
  // llama.cpp writes 0xFFFFFFFF (as uint32) for "none".
  if (!id || *id < 0 || *id >= 0xFFFFFFFFll) return -1;
  return static_cast<int32_t>(*id);
}

bool OptionalBool(const GgufFile& gguf, const std::string& key, bool fallback) {
  const GgufValue* v = gguf.Find(key);
  if (!v) return fallback;
  auto b = v->AsBool();
  return b ? *b : fallback;
}

Vocab ReadVocab(const GgufFile& gguf) {
  Vocab vocab;
  const auto& tokens = RequireArray(gguf, "tokenizer.ggml.tokens");
  vocab.pieces.reserve(tokens.size());
  for (const auto& t : tokens) vocab.pieces.push_back(String(t, gguf, "tokenizer.ggml.tokens"));
  vocab.types.assign(vocab.pieces.size(), TokenType::kNormal);
  if (gguf.Find("tokenizer.ggml.token_type")) {
    const auto& types = RequireArray(gguf, "tokenizer.ggml.token_type");
    if (types.size() != vocab.pieces.size())
      throw std::runtime_error(gguf.path() + ": token_type and tokens differ in length");
    for (size_t i = 0; i < types.size(); ++i) {
      auto t = types[i].AsInt();
      if (!t || *t < 1 || *t > 6)
        throw std::runtime_error(gguf.path() + ": bad token_type for token " + std::to_string(i));
      vocab.types[i] = static_cast<TokenType>(*t);
    }
  }
  vocab.bos = OptionalId(gguf, "tokenizer.ggml.bos_token_id");
  vocab.eos = OptionalId(gguf, "tokenizer.ggml.eos_token_id");
  vocab.unk = OptionalId(gguf, "tokenizer.ggml.unknown_token_id");
  vocab.pad = OptionalId(gguf, "tokenizer.ggml.padding_token_id");
  vocab.Check(gguf.path());
  return vocab;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadGgufTokenizer(const GgufFile& gguf) {
  const GgufValue* model_v = gguf.Find("tokenizer.ggml.model");
  if (!model_v || !model_v->AsString())
    throw std::runtime_error(gguf.path() + ": no tokenizer.ggml.model metadata");
  const std::string model = *model_v->AsString();
  Vocab vocab = ReadVocab(gguf);

  if (model == "llama") {
    const auto& scores = RequireArray(gguf, "tokenizer.ggml.scores");
    if (scores.size() != vocab.pieces.size())
      throw std::runtime_error(gguf.path() + ": scores and tokens differ in length");
    for (const auto& s : scores) {
      auto f = s.AsFloat();
      if (!f) throw std::runtime_error(gguf.path() + ": non-numeric score");
      vocab.scores.push_back(static_cast<float>(*f));
    }
    vocab.add_bos = OptionalBool(gguf, "tokenizer.ggml.add_bos_token", true);
    // llama.cpp's SPM vocabularies are BPE-merged by score with byte
    // fallback, no whitespace cleanup, and a dummy prefix unless disabled.
    SentencePieceOptions options;
    options.algorithm = SentencePieceAlgorithm::kBpe;
    options.byte_fallback = true;
    options.normalizer.remove_extra_whitespaces = false;
    options.normalizer.add_dummy_prefix =
        OptionalBool(gguf, "tokenizer.ggml.add_space_prefix", true);
    return MakeSentencePieceTokenizer(std::move(vocab), std::move(options), gguf.path());
  }
  if (model == "gpt2") {
    MergeList merges;
    for (const auto& m : RequireArray(gguf, "tokenizer.ggml.merges")) {
      std::string s = String(m, gguf, "tokenizer.ggml.merges");
      size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        throw std::runtime_error(gguf.path() + ": merge '" + s + "' has no space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    }
    ByteLevelBpeOptions options;
    std::string pre = "default";
    if (const GgufValue* p = gguf.Find("tokenizer.ggml.pre"); p && p->AsString()) pre = *p->AsString();
    try {
      options.pre_tokenizer = PreTokenizerFromName(pre);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(gguf.path() + ": " + e.what());
    }
    // Llama 3's tokenizer.json sets ignore_merges; llama.cpp does the same
    // for this pre-tokenizer.
    options.ignore_merges = options.pre_tokenizer == PreTokenizerKind::kLlama3;
    vocab.add_bos = OptionalBool(gguf, "tokenizer.ggml.add_bos_token", false);
    return MakeByteLevelBpeTokenizer(std::move(vocab), merges, options, gguf.path());
  }
  throw std::runtime_error(gguf.path() + ": unsupported tokenizer model '" + model + "'");
}

}  // namespace specline
