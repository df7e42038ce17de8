// SentencePiece's text normalizer: the optional precompiled character map
// (NFKC and friends), whitespace cleanup, the dummy-prefix space and the
// escaping of spaces as "▁" (U+2581).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specline {

struct NormalizerOptions {
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  // NormalizerSpec.precompiled_charsmap: a darts-clone double array keyed by
  // UTF-8 input, whose values index NUL-terminated replacement strings.
  std::string precompiled_charsmap;
};

class SentencePieceNormalizer {
 public:
  // Throws std::runtime_error (with `source`) for a malformed charsmap.
  SentencePieceNormalizer(NormalizerOptions options, const std::string& source);

  // Normalizes one stretch of text. `dummy_prefix` says whether this stretch
  // starts the text (or follows a control token) and so gets the dummy space.
  std::string Normalize(std::string_view text, bool dummy_prefix = true) const;

  const NormalizerOptions& options() const { return options_; }

 private:
  // The replacement for the longest charsmap key at the front of `in` and
  // how many input bytes it consumes; the character itself when none.
  std::pair<std::string_view, size_t> NormalizePrefix(std::string_view in) const;

  NormalizerOptions options_;
  std::vector<uint32_t> trie_;
  std::string_view replacements_;  // into options_.precompiled_charsmap
};

}  // namespace specline
