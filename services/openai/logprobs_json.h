// OpenAI's `logprobs` objects, built from GenerateResponse.logprobs (one
// entry per token id, docs/openai_api.md "logprobs"):
//   chat:        {"content": [{"token", "logprob", "bytes",
//                              "top_logprobs": [{"token", "logprob", "bytes"}]}],
//                 "refusal": null}
//   completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
//                 "text_offset"}
// A streamed chunk carries the object for its own tokens; a whole response
// the object for all of them.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "services/openai/openai_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

class LogprobsJson {
 public:
  // `tokenizer` spells the tokens (null: token ids as strings, "token_id:N").
  LogprobsJson(Endpoint endpoint, const Tokenizer* tokenizer);

  // The object for `message`'s tokens, also kept for Whole().
  nlohmann::json Add(const v1::GenerateResponse& message);
  // The object for every token added so far.
  const nlohmann::json& Whole() const { return whole_; }

 private:
  std::string Spell(int32_t id) const;
  nlohmann::json Empty() const;

  Endpoint endpoint_;
  const Tokenizer* tokenizer_;
  // The token before the next one, for the spelling rules that depend on it
  // (SentencePiece drops a leading space only at the start of a text; a
  // completion never starts one, so the first token's "previous" is an id
  // outside the vocabulary, which TokenBytes reads as "not the start").
  int32_t prev_;
  int64_t text_offset_ = 0;  // completions: bytes of the tokens so far
  nlohmann::json whole_;
};

}  // namespace specline::openai
