// Tokens as llama-server spells them on its native endpoints: a token's
// piece is its text with special tokens written out ("<|im_end|>"), as
// llama.cpp's common_token_to_piece(special = true) gives it; a piece that
// is not valid UTF-8 (part of a character) goes out as its list of bytes.
// Prompts come as llama-server takes them: a string, or a list mixing
// strings and token ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"

namespace specline::llama_server {

// Token `id`'s text, special tokens included, never with SentencePiece's
// start-of-text space dropped (llama-server's /tokenize pieces).
std::string TokenPiece(const Tokenizer& tokenizer, int32_t id);
// A piece as JSON: the string when it is valid UTF-8, else its bytes.
nlohmann::json PieceJson(const std::string& piece);
// The concatenated pieces (llama-server's /detokenize).
std::string Detokenize(const Tokenizer& tokenizer, const std::vector<int32_t>& ids);

// `content` (a string, or a list of strings and token ids) as token ids:
// strings encoded (special tokens parsed when `parse_special`), ids kept;
// BOS first when `add_special` and the model adds one and the content
// starts with a string (llama-server's rule). InvalidArgument naming
// `field` for any other shape or an id outside the vocabulary.
absl::StatusOr<std::vector<int32_t>> TokenizeMixed(const Tokenizer& tokenizer,
                                                   const nlohmann::json& content, bool add_special,
                                                   bool parse_special, const std::string& field);

}  // namespace specline::llama_server
