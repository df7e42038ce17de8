// Pre-tokenizers of byte-level BPE vocabularies: split text into the chunks
// that BPE merges never cross. Each variant is the regex its tokenizer was
// trained with, written out as a matcher over Unicode categories because
// std::regex has no \p{L}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace specline {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 but \p{N} one digit at a time.
  kQwen2,
  // Every \p{N} on its own first (HF Digits(individual_digits)), then kGpt2:
  // StarCoder-style vocabularies such as SmolLM/SmolLM2.
  kSmolLm,
  // No splitting at all: the whole text is one chunk.
  kNone,
};

// Maps a GGUF tokenizer.ggml.pre name ("gpt2", "llama-bpe", "qwen2",
// "smollm", ...); throws std::invalid_argument for names it does not know.
PreTokenizerKind PreTokenizerFromName(const std::string& name);

// Splits `text` into consecutive, non-empty chunks that cover it exactly.
std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerKind kind);

}  // namespace specline
