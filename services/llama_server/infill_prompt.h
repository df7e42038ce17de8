// The prompt of llama-server's POST /infill (fill-in-the-middle), laid out
// as llama-server 0c1e570 lays it out from the model's FIM tokens:
//
//   [extra context] [BOS] <FIM_PRE> prefix prompt <FIM_SUF> suffix <FIM_MID>
//
// The extra context is each input_extra chunk after <FIM_SEP>filename\n
// (after <FIM_REP>myproject\n), or after a "--- snippet ---" line when the
// model has no file separator; llama-server's budgets apply: the prefix's
// last 3/4 of a 2048-token batch, the suffix's first 1/4 less the prompt,
// the extra context's last n_ctx - 2048 + 2 tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "services/llama_server/fim_tokens.h"
#include "services/openai/openai_request.h"

namespace specline::llama_server {

// The body's input_prefix, input_suffix, input_extra and prompt checked
// (a 400 naming the field) and laid out into `ids`. `fim` must be usable.
std::optional<openai::ApiError> InfillPrompt(const nlohmann::json& body, const Tokenizer& tokenizer,
                                             const FimTokens& fim, int32_t n_ctx,
                                             std::vector<int32_t>* ids);

}  // namespace specline::llama_server
