// The tokenizer's vocabulary as the grammar engine sees it: every token as
// the raw bytes it appends to the text, control tokens as nothing (so no
// grammar can ever allow them), the stop ids as the tokens that end a
// grammar, padded to the model's vocabulary size (the logits' width).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace xgrammar {
class TokenizerInfo;
}

namespace specline::grammar {

class GrammarVocabulary {
 public:
  // `model_vocab_size`: the width of the logits, at least the tokenizer's
  // vocabulary (models pad it); ids past the tokenizer's are never allowed.
  // `tokenizer` must outlive this object.
  GrammarVocabulary(const Tokenizer& tokenizer, int32_t model_vocab_size);
  ~GrammarVocabulary();

  const xgrammar::TokenizerInfo& info() const { return *info_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  int32_t vocab_size() const { return vocab_size_; }
  // 32-bit words of a token mask: ceil(vocab_size / 32).
  int32_t mask_words() const { return (vocab_size_ + 31) / 32; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // The bytes token `id` appends inside grammar text ("" for control
  // tokens, stop tokens and the padding).
  const std::string& bytes(int32_t id) const { return bytes_[id]; }

  // A tokenization of `text` into tokens whose bytes concatenate to `text`
  // exactly: the tokenizer's own encoding when it has that property (byte-
  // level BPE), else the longest matching token at each position (a
  // SentencePiece encoding adds its "▁" dummy prefix). Either is a guess of
  // how the model would spell the text; callers verify what they use.
  std::vector<int32_t> Spell(const std::string& text) const;

 private:
  const Tokenizer& tokenizer_;
  int32_t vocab_size_;
  std::vector<int32_t> stop_ids_;
  std::vector<std::string> bytes_;
  std::unordered_map<std::string, int32_t> id_of_bytes_;  // for Spell's longest match
  size_t longest_token_ = 0;
  std::unique_ptr<xgrammar::TokenizerInfo> info_;
};

}  // namespace specline::grammar
