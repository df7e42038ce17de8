#include "model/grammar/grammar_vocabulary.h"

#include <algorithm>
#include <stdexcept>

#include <xgrammar/xgrammar.h>

namespace specline::grammar {
namespace {

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or
// code points past U+10FFFF): the tokenizers' Encode expects text, and a
// forced string may stop inside a character.
bool WellFormedUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    int n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xc2 && c <= 0xdf) { n = 1; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { n = 2; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= text.size()) return false;  // cut inside the character
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(text[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

GrammarVocabulary::GrammarVocabulary(const Tokenizer& tokenizer, int32_t model_vocab_size)
    : tokenizer_(tokenizer), vocab_size_(std::max(model_vocab_size, tokenizer.vocab_size())) {
  const int32_t n = tokenizer.vocab_size();
  for (int32_t id : tokenizer.stop_ids()) {
    if (id >= 0 && id < vocab_size_) stop_ids_.push_back(id);
  }
  // A SentencePiece piece keeps its leading space only when it does not
  // follow BOS: grammar text always continues a prompt, so spell every token
  // as it reads after an ordinary one.
  int32_t ordinary = 0;
  while (ordinary < n && (tokenizer.IsControl(ordinary) || tokenizer.TokenBytes(-1, ordinary).empty())) {
    ++ordinary;
  }
  bytes_.resize(vocab_size_);
  for (int32_t id = 0; id < n; ++id) {
    const bool stop = std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
    // xgrammar treats a token that decodes to "" as special: never allowed.
    if (tokenizer.IsControl(id) || stop) continue;
    bytes_[id] = tokenizer.TokenBytes(ordinary, id);
    if (bytes_[id].empty()) continue;
    longest_token_ = std::max(longest_token_, bytes_[id].size());
    // Duplicates (a byte token and a piece of the same byte): keep the lower id.
    id_of_bytes_.emplace(bytes_[id], id);
  }
  // VocabType::RAW: the strings are the bytes themselves, nothing to undo.
  std::vector<std::string> vocab(bytes_.begin(), bytes_.begin() + n);
  info_ = std::make_unique<xgrammar::TokenizerInfo>(vocab, xgrammar::VocabType::RAW, vocab_size_,
                                                    stop_ids_, /*add_prefix_space=*/false);
}

GrammarVocabulary::~GrammarVocabulary() = default;

std::vector<int32_t> GrammarVocabulary::Spell(const std::string& text) const {
  std::vector<int32_t> ids;
  if (text.empty()) return ids;
  std::vector<int32_t> encoded;
  if (WellFormedUtf8(text)) encoded = tokenizer_.Encode(text, /*add_bos=*/false);
  std::string spelled;
  for (int32_t id : encoded) {
    if (id < 0 || id >= vocab_size_ || bytes_[id].empty()) break;
    spelled += bytes_[id];
  }
  if (spelled == text) return encoded;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = std::min(longest_token_, text.size() - pos);
    for (; len > 0; --len) {
      auto it = id_of_bytes_.find(text.substr(pos, len));
      if (it != id_of_bytes_.end()) {
        ids.push_back(it->second);
        break;
      }
    }
    if (len == 0) break;  // a byte no token spells (no byte fallback): stop there
    pos += len;
  }
  return ids;
}

}  // namespace specline::grammar
