#include "model/tokenizer/normalizer.h"

#include <cstring>
#include <stdexcept>

#include "model/tokenizer/unicode.h"

namespace specline {
namespace {

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // ▁
constexpr std::string_view kReplacementChar = "\xef\xbf\xbd";

// darts-clone unit layout.
bool HasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t Value(uint32_t unit) { return unit & 0x7FFFFFFFu; }
uint32_t Label(uint32_t unit) { return unit & (0x80000000u | 0xFFu); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

SentencePieceNormalizer::SentencePieceNormalizer(NormalizerOptions options,
                                                 const std::string& source)
    : options_(std::move(options)) {
  const std::string& blob = options_.precompiled_charsmap;
  if (blob.empty()) return;
  uint32_t trie_bytes = 0;
  if (blob.size() < 4) throw std::runtime_error(source + ": truncated precompiled_charsmap");
  std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian, as every host we build for
  if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - 4)
    throw std::runtime_error(source + ": malformed precompiled_charsmap");
  trie_.resize(trie_bytes / 4);
  std::memcpy(trie_.data(), blob.data() + 4, trie_bytes);
  replacements_ = std::string_view(blob).substr(4 + trie_bytes);
}

std::pair<std::string_view, size_t> SentencePieceNormalizer::NormalizePrefix(
    std::string_view in) const {
  if (!trie_.empty()) {
    // Longest common-prefix match in the double array.
    size_t best_len = 0;
    uint32_t best_value = 0;
    uint32_t node = Offset(trie_[0]);
    for (size_t i = 0; i < in.size(); ++i) {
      auto c = static_cast<unsigned char>(in[i]);
      node ^= c;
      if (node >= trie_.size()) break;
      uint32_t unit = trie_[node];
      if (Label(unit) != c) break;
      node ^= Offset(unit);
      if (node >= trie_.size()) break;
      if (HasLeaf(unit)) {
        best_len = i + 1;
        best_value = Value(trie_[node]);
      }
    }
    if (best_len > 0 && best_value < replacements_.size()) {
      std::string_view rest = replacements_.substr(best_value);
      return {rest.substr(0, rest.find('\0')), best_len};
    }
  }
  int len;
  char32_t cp = unicode::DecodeUtf8(in, 0, &len);
  if (cp == 0xFFFD && len == 1 && static_cast<unsigned char>(in[0]) >= 0x80)
    return {kReplacementChar, 1};
  return {in.substr(0, len), static_cast<size_t>(len)};
}

std::string SentencePieceNormalizer::Normalize(std::string_view in, bool dummy_prefix) const {
  // Mirrors sentencepiece::normalizer::Normalizer::Normalize.
  std::string out;
  const bool remove_ws = options_.remove_extra_whitespaces;
  const std::string_view space = options_.escape_whitespaces ? kSpaceSymbol : " ";
  if (remove_ws) {
    while (!in.empty()) {
      auto [piece, used] = NormalizePrefix(in);
      if (piece != " ") break;
      in.remove_prefix(used);
    }
  }
  if (in.empty()) return out;
  out.reserve(in.size() * 3 / 2 + 3);
  const bool add_dummy = dummy_prefix && options_.add_dummy_prefix;
  if (add_dummy && !options_.treat_whitespace_as_suffix) out.append(space);
  bool prev_space = remove_ws;
  while (!in.empty()) {
    auto [piece, used] = NormalizePrefix(in);
    if (prev_space && remove_ws) {
      while (!piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    }
    if (!piece.empty()) {
      for (char c : piece) {
        if (c == ' ') out.append(space); else out.push_back(c);
      }
      prev_space = piece.back() == ' ';
    }
    in.remove_prefix(used);
    if (!remove_ws) prev_space = false;
  }
  if (remove_ws) {
    while (out.size() >= space.size() &&
           std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  }
  if (add_dummy && options_.treat_whitespace_as_suffix) out.append(space);
  return out;
}

}  // namespace specline
