#include "scheduler/sequence.h"

#include <algorithm>

#include "scheduler/decoding_policy.h"
#include "scheduler/sequence_grammar.h"

namespace specline::scheduler {

const char* SeqStateName(SeqState s) {
  switch (s) {
    case SeqState::kWaiting: return "waiting";
    case SeqState::kPrefill: return "prefill";
    case SeqState::kDecode: return "decode";
    case SeqState::kFinished: return "finished";
  }
  return "?";
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "?";
}

Sequence::Sequence(uint64_t id_, RequestOptions spec)
    : id(id_),
      request_id(std::move(spec.request_id)),
      tenant(std::move(spec.tenant)),
      tokens(std::move(spec.prompt)),
      prompt_len(static_cast<int>(tokens.size())),
      max_tokens(spec.max_tokens),
      stop_ids(std::move(spec.stop_ids)),
      sampling(spec.sampling),
      top_logprobs(spec.top_logprobs),
      cache_scope(std::move(spec.cache_scope)),
      rng(spec.sampling.seed),
      grammar(spec.grammar ? std::make_unique<SequenceGrammar>(spec.grammar) : nullptr),
      arrival(Clock::now()),
      mode(spec.mode) {}

Sequence::~Sequence() = default;

SamplingContext Sequence::SamplingContextFor(std::span<const int32_t> history,
                                             int draft_index) const {
  return {history, prompt_len, grammar ? grammar->MaskAt(draft_index) : std::span<const uint32_t>{}};
}

int32_t Sequence::chain_end() const {
  return policy ? policy->ChainEnd(*this) : static_cast<int32_t>(tokens.size());
}

bool Sequence::MayGenerateAt(int32_t p) const {
  if (p - prompt_len >= max_tokens) return false;
  const bool positions_are_tokens = policy == nullptr || policy->LimitedByContext();
  return !positions_are_tokens || p <= context_len;
}

int32_t Sequence::RoomAheadFrom(int32_t from) const {
  // MayGenerateAt(p) and p < context_len hold exactly below this end.
  return std::min(prompt_len + max_tokens, context_len) - from;
}

}  // namespace specline::scheduler
