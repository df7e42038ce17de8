#include "services/llama_server/fim_tokens.h"

#include <string_view>
#include <vector>

#include "model/formats/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {
namespace {

// One FIM role: its metadata keys, newest first, and the token texts the
// families that were trained with it write it as.
struct FimRole {
  int32_t FimTokens::*field;
  std::vector<const char*> keys;
  std::vector<std::string_view> texts;
};

const std::vector<FimRole>& Roles() {
  static const std::vector<FimRole> roles = {
      {&FimTokens::pre,
       {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>"}},
      {&FimTokens::suf,
       {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>"}},
      {&FimTokens::mid,
       {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>"}},
      {&FimTokens::pad,
       {"tokenizer.ggml.fim_pad_token_id"},
       {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {&FimTokens::rep,
       {"tokenizer.ggml.fim_rep_token_id"},
       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&FimTokens::sep, {"tokenizer.ggml.fim_sep_token_id"}, {"<|file_sep|>"}},
  };
  return roles;
}

int32_t FromMetadata(const GgufFile& gguf, const FimRole& role, int32_t vocab_size) {
  for (const char* key : role.keys) {
    const GgufValue* v = gguf.Find(key);
    if (!v) continue;
    const std::optional<int64_t> id = v->AsInt();
    if (id && *id >= 0 && *id < vocab_size) return static_cast<int32_t>(*id);
  }
  return -1;
}

// The first token, in id order, whose text is one of the role's.
int32_t FromVocabulary(const Tokenizer& tokenizer, const FimRole& role) {
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string& piece = tokenizer.Piece(id);
    for (std::string_view text : role.texts) {
      if (piece == text) return id;
    }
  }
  return -1;
}

}  // namespace

std::string FimTokens::Missing() const {
  std::string missing;
  for (const auto& [id, name] : {std::pair{pre, "prefix"}, {suf, "suffix"}, {mid, "middle"}}) {
    if (id >= 0) continue;
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
  return missing;
}

FimTokens FindFimTokens(const Tokenizer* tokenizer, const GgufFile* gguf) {
  FimTokens fim;
  if (!tokenizer) return fim;
  for (const FimRole& role : Roles()) {
    int32_t id = gguf ? FromMetadata(*gguf, role, tokenizer->vocab_size()) : -1;
    if (id < 0) id = FromVocabulary(*tokenizer, role);
    fim.*role.field = id;
  }
  return fim;
}

}  // namespace specline
