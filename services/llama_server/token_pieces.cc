#include "services/llama_server/token_pieces.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/unicode.h"

namespace specline::llama_server {

std::string TokenPiece(const Tokenizer& tokenizer, int32_t id) {
  if (tokenizer.IsControl(id)) return tokenizer.Piece(id);
  // A "previous" id outside the vocabulary reads as "not the start of a
  // text", so SentencePiece keeps the piece's leading space as llama.cpp does.
  return tokenizer.TokenBytes(tokenizer.vocab_size(), id);
}

nlohmann::json PieceJson(const std::string& piece) {
  if (unicode::IsValidUtf8(piece)) return piece;
  nlohmann::json bytes = nlohmann::json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

std::string Detokenize(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) text += TokenPiece(tokenizer, id);
  return text;
}

absl::StatusOr<std::vector<int32_t>> TokenizeMixed(const Tokenizer& tokenizer,
                                                   const nlohmann::json& content, bool add_special,
                                                   bool parse_special, const std::string& field) {
  const bool bos = add_special && tokenizer.add_bos_by_default();
  if (content.is_string())
    return tokenizer.Encode(content.get<std::string>(), bos, parse_special);
  if (!content.is_array())
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a string or a list of strings and token ids"));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < content.size(); ++i) {
    const nlohmann::json& part = content[i];
    if (part.is_string()) {
      std::vector<int32_t> more = tokenizer.Encode(part.get<std::string>(), bos && i == 0, parse_special);
      ids.insert(ids.end(), more.begin(), more.end());
    } else if (part.is_number_integer()) {
      const int64_t id = part.get<int64_t>();
      if (id < 0 || id >= tokenizer.vocab_size())
        return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: token id ", id,
                                                       " is outside the vocabulary [0, ",
                                                       tokenizer.vocab_size(), ")"));
      ids.push_back(static_cast<int32_t>(id));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: must be a string or a token id, got ", part.type_name()));
    }
  }
  return ids;
}

}  // namespace specline::llama_server
