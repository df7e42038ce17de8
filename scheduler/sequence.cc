#include "scheduler/sequence.h"

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

const char* SpecModeName(SpecMode m) {
  switch (m) {
    case SpecMode::kAutoregressive: return "autoregressive";
    case SpecMode::kPpsd: return "ppsd";
    case SpecMode::kSpd: return "spd";
    case SpecMode::kPtp: return "ptp";
    case SpecMode::kPipo: return "pipo";
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

Sequence::Sequence(uint64_t id_, RequestSpec spec)
    : id(id_),
      request_id(std::move(spec.request_id)),
      tokens(std::move(spec.prompt)),
      prompt_len(static_cast<int>(tokens.size())),
      max_tokens(spec.max_tokens),
      stop_ids(std::move(spec.stop_ids)),
      sampling(spec.sampling),
      rng(spec.sampling.seed),
      arrival(Clock::now()),
      mode(spec.mode),
      oracle_spec(std::move(spec.oracle)) {
  // The drafter's stream must not share uniforms with the verifier's.
  SeedSpeculation(spec.sampling.seed);
}

void Sequence::SeedSpeculation(uint64_t seed) {
  spec.draft_rng = Rng(seed ^ 0x9e3779b97f4a7c15ULL);
  if (oracle_spec.enabled) {
    oracle = std::make_unique<OracleDrafter>(oracle_spec.alpha, seed ^ 0xd1b54a32d192ed03ULL);
  }
}

}  // namespace specline::scheduler
