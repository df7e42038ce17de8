// Vocabulary shared by both tokenizer families: pieces, scores and token
// types as every source format (SentencePiece .model, tokenizer.bin, GGUF,
// tokenizer.json) can express them, plus the special-token splitter.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace specline {

// SentencePiece's piece types; GGUF token_type uses the same numbers
// (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
enum class TokenType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;  // SentencePiece only; empty otherwise
  std::vector<TokenType> types;
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = true;  // whether the model expects BOS in front of a prompt
  std::vector<int32_t> stop_ids;

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  bool Valid(int32_t id) const { return id >= 0 && id < size(); }
  // Ids must be valid and the arrays consistent; throws std::runtime_error
  // with `source` in the message otherwise.
  void Check(const std::string& source) const;
  // EOS plus the end-of-turn markers chat vocabularies define.
  void CollectStopIds();
};

// The Tokenizer methods that only read the vocabulary, shared by the
// SentencePiece and byte-level BPE tokenizers.
class VocabTokenizer : public Tokenizer {
 public:
  const std::string& Piece(int32_t id) const override {
    static const std::string kEmpty;
    return vocab_.Valid(id) ? vocab_.pieces[id] : kEmpty;
  }
  int32_t vocab_size() const override { return vocab_.size(); }
  int32_t bos_id() const override { return vocab_.bos; }
  int32_t eos_id() const override { return vocab_.eos; }
  const std::vector<int32_t>& stop_ids() const override { return vocab_.stop_ids; }
  bool IsControl(int32_t id) const override {
    return vocab_.Valid(id) && vocab_.types[id] == TokenType::kControl;
  }
  bool add_bos_by_default() const override { return vocab_.add_bos; }

 protected:
  explicit VocabTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  Vocab vocab_;
};

// Splits text at special tokens before the model's own algorithm runs.
// User-defined tokens are always recognised (as SentencePiece and HF added
// tokens are); control tokens only when the caller asks (parse_special).
class SpecialSplitter {
 public:
  void Build(const Vocab& vocab);
  bool empty() const { return always_.empty() && control_.empty(); }

  struct Fragment {
    std::string_view text;  // when id < 0
    int32_t id = -1;
    bool control = false;   // id is a control token
  };
  std::vector<Fragment> Split(std::string_view text, bool parse_special) const;

 private:
  // Candidates keyed by first byte, longest first, so the longest special
  // wins at each position (HF matches leftmost-longest too).
  using Table = std::unordered_map<unsigned char, std::vector<std::pair<std::string, int32_t>>>;
  static void Add(Table* table, const std::string& piece, int32_t id);
  static int32_t Match(const Table& t, std::string_view rest, size_t* len);
  Table always_;
  Table control_;
};

}  // namespace specline
