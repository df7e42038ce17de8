// One request's life inside the scheduler: the per-sequence state machine.
//
//   WAITING --admit--> PREFILL --last prompt chunk back--> DECODE --> FINISHED
//      |                  |                                  |
//      +------------------+----- cancel / pipeline failure --+--> FINISHED
//
// A sequence's inputs are simply `tokens` (prompt, then every generated
// token); `cached` counts the positions whose KV the stages hold (or will
// hold once the batch in flight returns). Whatever lies in
// tokens[cached, end) is the work still to send: a prompt remainder during
// PREFILL, the one newest token during DECODE. Speculation (issue 4) extends
// this: draft tokens are appended past the verified ones, and a rejected
// draft moves `cached` back and bumps `epoch`, which stages use to drop stale
// slots and to truncate their caches implicitly.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "model/runtime/sampler.h"

namespace specline::scheduler {

using Clock = std::chrono::steady_clock;

enum class SeqState { kWaiting, kPrefill, kDecode, kFinished };
const char* SeqStateName(SeqState s);

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason r);

// What a caller asks for; validated before it becomes a Sequence.
struct RequestSpec {
  std::string request_id;  // for logs; the engine's numeric id is separate
  std::vector<int32_t> prompt;
  SamplingParams sampling;  // sampling.seed is used as given
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one
};

struct Sequence {
  Sequence(uint64_t id, RequestSpec spec);

  uint64_t id;
  std::string request_id;
  SeqState state = SeqState::kWaiting;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int prompt_len = 0;
  int max_tokens = 0;
  std::vector<int32_t> stop_ids;
  SamplingParams sampling;
  Rng rng;  // one stream per sequence, so results do not depend on batching

  int32_t cached = 0;      // positions the stages hold (incl. in flight)
  uint32_t epoch = 0;      // bumped on flush (speculative rollback, issue 4)
  bool in_flight = false;  // AR: at most one batch carries this sequence
  bool sent_any = false;   // stages may hold KV: a release is due at the end
  int64_t kv_blocks = 0;   // reserved by admission, returned at the end

  Clock::time_point arrival;
  Clock::time_point first_scheduled{};
  Clock::time_point first_token{};

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  // Inputs not yet sent to the stages.
  int32_t pending() const { return static_cast<int32_t>(tokens.size()) - cached; }
  bool finished() const { return state == SeqState::kFinished; }
};

}  // namespace specline::scheduler
