// Reads SentencePiece vocabularies from upstream's .model protobuf and from
// llama2.c's tokenizer.bin.
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "model/tokenizer/sentencepiece.h"
#include "model/tokenizer/tokenizer.h"
#include "sentencepiece_model.pb.h"

namespace specline {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open tokenizer file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::unique_ptr<Tokenizer> LoadSentencePieceModel(const std::string& path) {
  namespace pb = specline::sentencepiece;
  pb::ModelProto model;
  std::string bytes = ReadWholeFile(path);
  if (!model.ParseFromString(bytes))
    throw std::runtime_error(path + ": not a SentencePiece model (protobuf parse failed)");
  if (model.pieces_size() == 0) throw std::runtime_error(path + ": SentencePiece model has no pieces");

  Vocab vocab;
  vocab.pieces.reserve(model.pieces_size());
  for (const auto& p : model.pieces()) {
    vocab.pieces.push_back(p.piece());
    vocab.scores.push_back(p.score());
    vocab.types.push_back(static_cast<TokenType>(p.type()));
  }
  const auto& trainer = model.trainer_spec();
  auto id_or_none = [&](int32_t id) { return id >= 0 && id < vocab.size() ? id : -1; };
  vocab.unk = id_or_none(trainer.unk_id());
  vocab.bos = id_or_none(trainer.bos_id());
  vocab.eos = id_or_none(trainer.eos_id());
  vocab.pad = id_or_none(trainer.pad_id());

  SentencePieceOptions options;
  switch (trainer.model_type()) {
    case pb::TrainerSpec::BPE: options.algorithm = SentencePieceAlgorithm::kBpe; break;
    case pb::TrainerSpec::UNIGRAM: options.algorithm = SentencePieceAlgorithm::kUnigram; break;
    default:
      // WORD and CHAR models are a whitespace split and a character split;
      // no LLM ships one.
      throw std::runtime_error(path + ": unsupported SentencePiece model type " +
                               std::to_string(trainer.model_type()));
  }
  options.byte_fallback = trainer.byte_fallback();
  const auto& norm = model.normalizer_spec();
  options.normalizer.add_dummy_prefix = norm.add_dummy_prefix();
  options.normalizer.remove_extra_whitespaces = norm.remove_extra_whitespaces();
  options.normalizer.escape_whitespaces = norm.escape_whitespaces();
  options.normalizer.treat_whitespace_as_suffix = trainer.treat_whitespace_as_suffix();
  options.normalizer.precompiled_charsmap = norm.precompiled_charsmap();
  return MakeSentencePieceTokenizer(std::move(vocab), std::move(options), path);
}

std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int32_t vocab_size) {
  // int32 max_token_length, then per token: float score, int32 length,
  // bytes. llama2.c's exporter wrote "▁" as " " and BOS/EOS as "\n<s>\n" /
  // "\n</s>\n"; both are undone so the pieces equal the .model file's.
  std::string bytes = ReadWholeFile(path);
  size_t pos = 0;
  auto read = [&](void* dst, size_t n, const char* what) {
    if (n > bytes.size() - pos)
      throw std::runtime_error(path + ": truncated tokenizer.bin (reading " + what + " at byte " +
                               std::to_string(pos) + ")");
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
  };
  int32_t max_len = 0;
  read(&max_len, 4, "header");
  if (max_len <= 0 || max_len > (1 << 20))
    throw std::runtime_error(path + ": bad max_token_length " + std::to_string(max_len));

  Vocab vocab;
  // vocab_size <= 0: the file alone decides (read to its end).
  for (int32_t i = 0; vocab_size > 0 ? i < vocab_size : pos < bytes.size(); ++i) {
    float score;
    int32_t len;
    read(&score, 4, "score");
    read(&len, 4, "length");
    if (len < 0 || len > max_len)
      throw std::runtime_error(path + ": token " + std::to_string(i) + " has bad length " +
                               std::to_string(len));
    std::string raw(static_cast<size_t>(len), '\0');
    read(raw.data(), raw.size(), "token");
    std::string piece;
    for (char c : raw) {
      if (c == ' ') piece += "\xe2\x96\x81"; else piece.push_back(c);
    }
    TokenType type = TokenType::kNormal;
    if (i == 0) {
      type = TokenType::kUnknown;
    } else if (i == 1 || i == 2) {
      type = TokenType::kControl;
      piece = i == 1 ? "<s>" : "</s>";
    } else if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
      type = TokenType::kByte;
    }
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  }
  if (vocab.size() < 3) throw std::runtime_error(path + ": tokenizer.bin has fewer than 3 tokens");
  vocab.unk = 0;
  vocab.bos = 1;
  vocab.eos = 2;
  // llama2.c's encoder: dummy prefix, no whitespace cleanup, byte fallback.
  SentencePieceOptions options;
  options.algorithm = SentencePieceAlgorithm::kBpe;
  options.byte_fallback = true;
  options.normalizer.add_dummy_prefix = true;
  options.normalizer.remove_extra_whitespaces = false;
  return MakeSentencePieceTokenizer(std::move(vocab), std::move(options), path);
}

}  // namespace specline
