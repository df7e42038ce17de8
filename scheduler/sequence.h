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
// PREFILL, the one newest token during DECODE.
//
// A decoding policy (scheduler/decoding_policy.h) may send inputs ahead of
// the verified tokens: pipeline speculation's drafts, each riding one
// micro-batch behind its predecessor (policies/pipeline_draft.h). The
// chain is then tokens ++ drafts and `cached` counts sent positions of the
// chain. A rejected draft moves `cached` back to the replacement's position
// and bumps `epoch`, which stages use to drop stale slots (their caches
// roll back implicitly when the replacement is written).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/grammar/grammar_compiler.h"
#include "model/runtime/sampler.h"
#include "scheduler/spec_state.h"

namespace specline::scheduler {

class DecodingPolicy;
struct PolicyState;
struct PreparedRequest;
class SequenceGrammar;

using Clock = std::chrono::steady_clock;

enum class SeqState { kWaiting, kPrefill, kDecode, kFinished };
const char* SeqStateName(SeqState s);

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* FinishReasonName(FinishReason r);

// What a caller asks for; validated before it becomes a Sequence.
struct RequestOptions {
  std::string request_id;  // for logs; the engine's numeric id is separate
  // The principal that sent it ("" without authentication): fair admission
  // and the per-tenant KV quota count by it (scheduler/admission_queue.h).
  std::string tenant;
  std::vector<int32_t> prompt;
  SamplingParams sampling;  // sampling.seed is used as given
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one
  v1::DecodingPolicy mode = v1::DECODING_POLICY_AUTOREGRESSIVE;
  OracleOptions oracle;  // tests and benchmarks: draft with the oracle instead of a head
  float pipo_tau = -1;  // PIPO's threshold; < 0 = the server's default
  // Prefix-cache namespace (SubmitRequest.cache_scope): only requests of
  // equal scopes share cached blocks; "" = the shared one.
  std::string cache_scope;
  // Structured output: the grammar every generated token keeps to (null:
  // free text). Compiled once per format (grammar::GrammarCompiler).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // Log-probabilities of each emitted token with this many alternatives
  // (0..20); -1 = none asked for.
  int top_logprobs = -1;
};

// Always held by shared_ptr (the engine's lists, in-flight batches):
// whatever ends a sequence takes a reference first (shared_from_this), so
// removing it from a list cannot free it mid-call.
struct Sequence : std::enable_shared_from_this<Sequence> {
  Sequence(uint64_t id, RequestOptions spec);
  ~Sequence();  // PolicyState is complete in sequence.cc

  // The stages' id of this attempt: never reused, so a stale batch can
  // never touch another sequence's KV.
  uint64_t id;
  // The client's stream (RequestStream::id): stable across the restarts
  // of a request that failed before its first token (docs/serving.md
  // "Failures").
  uint64_t stream_id = 0;
  // What Submit was given, and what its policy prepared from it once
  // (DecodingPolicy::Prepare), kept to restart.
  std::shared_ptr<const RequestOptions> origin;
  std::shared_ptr<const PreparedRequest> prepared;
  int attempts = 1;
  // While waiting for the pipeline to come back: fail when it has not by then.
  std::chrono::steady_clock::time_point retry_deadline{};
  std::string request_id;
  std::string tenant;  // RequestOptions::tenant
  SeqState state = SeqState::kWaiting;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int prompt_len = 0;
  int max_tokens = 0;
  std::vector<int32_t> stop_ids;
  SamplingParams sampling;
  int top_logprobs = -1;  // RequestOptions::top_logprobs
  std::string cache_scope;  // salts its prefix-cache keys (RequestOptions)
  Rng rng;  // one stream per sequence, so results do not depend on batching
  // The grammar's state along the chain (scheduler/sequence_grammar.h);
  // null without structured output.
  std::unique_ptr<SequenceGrammar> grammar;

  int32_t cached = 0;      // chain positions the stages hold (incl. in flight)
  uint32_t epoch = 0;      // bumped on flush (speculative rollback)
  int in_flight = 0;       // micro-batches out that carry this sequence
  bool sent_any = false;   // stages may hold KV: a release is due at the end
  int64_t kv_blocks = 0;   // worst case: what admission must find for it
  int64_t kv_reserved = 0; // reserved by admission (less shared blocks), returned at the end

  // Prefix caching (scheduler/prefix_cache.h, docs/prefix_caching.md).
  struct Prefix {
    bool keyed = false;      // admission looked at the cache (this pipeline)
    bool cacheable = false;  // the cache is on and the policy can use it
    // Keys of the sequence's full blocks (prompt, then verified tokens),
    // made as far as they are needed, and the salt they were made with.
    std::vector<uint64_t> keys;
    uint64_t salt = 0;
    uint32_t weight_set = 0;  // whose cache on the stages
    // Leading keys this sequence holds a reference on: attached at
    // admission, then published as its computed blocks become final.
    int32_t held = 0;
    int32_t computed = 0;    // chain positions every stage has computed (runs came back)
    bool publishing = true;  // false once a stage refused the sequence
    bool attached = false;   // the stages hold blocks for it before any slot was sent
    int32_t cached_tokens = 0;  // prompt positions it did not compute
  } prefix;

  Clock::time_point arrival;
  Clock::time_point first_scheduled{};
  Clock::time_point first_token{};

  // How it decodes: its policy, and that policy's own per-sequence state
  // (drafts, PTP proposals, PIPO pairs). The counters every policy reports.
  v1::DecodingPolicy mode = v1::DECODING_POLICY_AUTOREGRESSIVE;
  DecodingPolicy* policy = nullptr;
  std::unique_ptr<PolicyState> policy_state;
  SpecStats stats;
  // The context length (ModelConfig::max_seq_len): rows use positions
  // below it. Set when the engine makes the sequence.
  int32_t context_len = 0;

  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  bool wants_logprobs() const { return top_logprobs >= 0; }
  // What sampling the position after `history` (tokens, then drafts or
  // accepted proposals) depends on besides the parameters. Every policy
  // builds its contexts here, so all of them process a row alike.
  // `draft_index` i: the position is the verified end plus i drafts, all
  // accepted so far (history = tokens and those drafts); its grammar mask
  // is SequenceGrammar::MaskAt(i).
  SamplingContext SamplingContextFor(std::span<const int32_t> history, int draft_index = 0) const;
  // Length of the chain of inputs: verified tokens, then whatever the
  // policy sends ahead of them (drafts; PIPO: pairs).
  int32_t chain_end() const;
  // Inputs not yet sent to the stages.
  int32_t pending() const { return chain_end() - cached; }
  // The stop rule, written only here: whether the token at chain position
  // p may still be generated. It may while the request wants more
  // (max_tokens) and the row that decides it, p - 1, fits the context; a
  // policy whose positions are not tokens (PIPO's pairs) bounds them itself
  // (DecodingPolicy::LimitedByContext). The same rules, in the same order,
  // as Generate in model/runtime/generator.cc.
  bool MayGenerateAt(int32_t p) const;
  // How many inputs sent ahead of the verified tokens (drafts, proposals)
  // from chain position `from` on can pay off: each one's own token may be
  // generated (MayGenerateAt) and its own row fits the context. <= 0: none.
  int32_t RoomAheadFrom(int32_t from) const;
  bool finished() const { return state == SeqState::kFinished; }
};

}  // namespace specline::scheduler
