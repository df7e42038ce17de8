// SentencePiece tokenization over an in-memory vocabulary: BPE (merge the
// adjacent pair whose union has the highest score, as Llama 2 and the stories
// models use) and unigram (Viterbi over piece log-probabilities), both with
// byte fallback. The loaders for .model, tokenizer.bin and GGUF fill in a
// Vocab and options and call MakeSentencePieceTokenizer.
#pragma once

#include <memory>
#include <string>

#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace specline {

enum class SentencePieceAlgorithm { kUnigram, kBpe };

struct SentencePieceOptions {
  SentencePieceAlgorithm algorithm = SentencePieceAlgorithm::kBpe;
  bool byte_fallback = true;
  NormalizerOptions normalizer;
};

// `source` names the file for error messages.
std::unique_ptr<Tokenizer> MakeSentencePieceTokenizer(Vocab vocab, SentencePieceOptions options,
                                                      const std::string& source);

}  // namespace specline
