// GPT-2 style byte-level BPE (Llama 3, Qwen2, SmolLM2): text is split by a
// pre-tokenizer regex, each chunk's bytes are spelled with the printable
// stand-in characters of GPT-2's bytes_to_unicode table, and merges are
// applied in rank order. Loaders for tokenizer.json and GGUF fill in a Vocab
// and merge list and call MakeByteLevelBpeTokenizer.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace specline {

struct ByteLevelBpeOptions {
  PreTokenizerKind pre_tokenizer = PreTokenizerKind::kGpt2;
  // HF "ignore_merges" (Llama 3): a chunk that is itself a token is taken
  // whole without running merges.
  bool ignore_merges = false;
};

// Merges in rank order, each as its two halves (in byte-level spelling).
using MergeList = std::vector<std::pair<std::string, std::string>>;

// The printable character GPT-2 uses for byte `b`, and back (-1 if `cp` is
// none of them).
char32_t ByteToUnicode(uint8_t b);
int UnicodeToByte(char32_t cp);

// `source` names the file for error messages. Merges naming pieces that are
// not in the vocabulary are an error.
std::unique_ptr<Tokenizer> MakeByteLevelBpeTokenizer(Vocab vocab, const MergeList& merges,
                                                     ByteLevelBpeOptions options,
                                                     const std::string& source);

}  // namespace specline
