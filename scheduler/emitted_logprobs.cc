#include "scheduler/emitted_logprobs.h"

#include <cmath>

#include "model/runtime/logprobs.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

v1::TokenLogprob LogprobOfRow(const Sequence& s, int32_t token, std::span<const float> row) {
  v1::TokenLogprob out;
  out.set_token_id(token);
  if (row.empty() || token < 0 || token >= static_cast<int32_t>(row.size())) {
    spdlog::error("request {} (seq {}): no logits row for the logprobs of token {}", s.request_id,
                  s.id, token);
    out.set_logprob(std::nanf(""));
    return out;
  }
  const TokenLogprob lp =
      ComputeLogprobs(row, s.sampling, s.SamplingContextFor(s.tokens), token, s.top_logprobs);
  out.set_logprob(lp.logprob);
  for (const auto& [id, value] : lp.top) {
    v1::TopLogprob* t = out.add_top();
    t->set_token_id(id);
    t->set_logprob(value);
  }
  return out;
}

}  // namespace specline::scheduler
