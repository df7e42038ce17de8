// The model's fill-in-the-middle tokens, which llama-server's /infill
// builds its prompt from: the ids a GGUF names in its metadata
// (tokenizer.ggml.fim_pre_token_id, ..., or the older prefix/suffix/middle
// keys), else the vocabulary's tokens with the texts FIM-trained families
// use (<|fim_prefix|>, <fim_prefix>, <PRE>, ...), found as llama.cpp finds
// them so that the same file gets the same tokens.
#pragma once

#include <cstdint>
#include <string>

namespace specline {

class GgufFile;
class Tokenizer;

struct FimTokens {
  int32_t pre = -1;  // -1: the model has none
  int32_t suf = -1;
  int32_t mid = -1;
  int32_t pad = -1;
  int32_t rep = -1;  // repository name (the repo-level pattern)
  int32_t sep = -1;  // file separator

  bool usable() const { return pre >= 0 && suf >= 0 && mid >= 0; }
  // What is missing for /infill ("prefix, middle"), "" when usable.
  std::string Missing() const;
};

// `gguf` may be null (a model that is no GGUF); `tokenizer` may be null
// (no tokenizer: no FIM tokens either).
FimTokens FindFimTokens(const Tokenizer* tokenizer, const GgufFile* gguf);

}  // namespace specline
