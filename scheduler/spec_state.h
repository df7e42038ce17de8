// The decoding methods, the counters every speculative policy reports, and
// the per-sequence state of pipeline speculation (docs/speculation.md): the
// drafts in flight and the features (taps) the drafter reads.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "model/runtime/sampler.h"
#include "proto/policy_names.h"
#include "specline/v1/generation.pb.h"

namespace specline::scheduler {

// Oracle drafter (tests and benchmarks only): instead of a head, propose
// reference[i] (the i-th generated token of a plain run) with probability
// alpha, else a wrong token. The sequence keeps its mode's timing (PPSD:
// after layer E; SPD: at once).
struct OracleOptions {
  bool enabled = false;
  double alpha = 0;
  std::vector<int32_t> reference;  // generated tokens of the plain run
};

struct DraftToken {
  int32_t token = 0;
  // The drafter's distribution (under the request's warping) that token
  // was drawn from; empty ids = a point mass on `token` (greedy drafts, the
  // oracle).
  TokenDistribution q;
};

// Counters of one request; also what the final stream event reports.
struct SpecStats {
  int64_t drafts = 0;           // chains started (a draft sent after a verified token)
  int64_t draft_tokens = 0;     // drafts sent
  int64_t accepted_tokens = 0;  // drafts verified and kept
  int64_t rejected_tokens = 0;  // drafts verified and replaced (each one a flush)
  int64_t discarded_tokens = 0; // drafts dropped unverified (flush or finish)
  std::vector<int64_t> accepted_per_pos;  // by position in the chain (0 = first draft)
  // Pipeline cycles K of the SPD accounting: a token whose draft was
  // accepted costs one cycle; a token decided without a live draft (plain,
  // corrected, or the first) costs n, the pipeline's depth.
  int64_t cycles = 0;
  // Drafts sent, by the source that proposed them, for drafters that have
  // several (the training-free drafter: prompt_lookup, recent_requests,
  // token_recycling): proposals and their tokens.
  std::map<std::string, int64_t> drafts_by_source;
  std::map<std::string, int64_t> draft_tokens_by_source;

  int64_t flushes() const { return rejected_tokens; }
};

// The drafts of one sequence under pipeline speculation
// (policies/pipeline_draft.h) and the features its drafter reads.
struct SpecState {
  std::deque<DraftToken> drafts;  // chain positions tokens.size() ...
  int chain_index = 0;            // drafts since the last verified token was decided
  // Taps of the current chain by position, then global layer index.
  std::map<int32_t, std::map<int, std::vector<float>>> taps;
  // (epoch a flush started, chain length it kept), the newest last: a row
  // computed in an older epoch is still valid when every flush since kept
  // its position (TapsValid). Its taps can arrive after a flush: an early
  // TAPS message from a middle stage races the last stage's output on
  // another connection, and that output may be the one whose logits caused
  // the flush. Bounded; rows from older epochs are dropped.
  std::deque<std::pair<uint32_t, int32_t>> flush_history;
  static constexpr size_t kFlushHistory = 64;
  bool TapsValid(uint32_t row_epoch, uint32_t epoch, int32_t pos) const;
  // The chain's end after `verified` tokens.
  int32_t end(int32_t verified) const { return verified + static_cast<int32_t>(drafts.size()); }
  // Positions [0, fed) are final in the drafter's own state (its KV cache):
  // their taps are no longer needed. A flush at p lowers it to p.
  int32_t fed = 0;
  Rng draft_rng{0};           // the drafter's randomness, separate from the verifier's
  // Recent share of tokens that arrived as accepted drafts while the
  // sequence drafted (a rejection, or a draft not ready in time, counts 0),
  // for the auto policy. It starts at the policy's pooled share (0.5 on a
  // new server): at 1 a request whose drafts never fit wasted ~6 of them
  // before backing off, several percent of a short request
  // (bench/spec_bench, alpha = 0).
  double acceptance_ema = 0.5;
  int tokens_since_draft = 0;
  // The chain end at which the drafter last had no guess: it is not asked
  // again until the chain moves.
  int32_t no_draft_at = -1;
};

// Flushes start epochs row_epoch + 1 .. epoch, each recorded in
// flush_history with the chain length it kept.
inline bool SpecState::TapsValid(uint32_t row_epoch, uint32_t epoch, int32_t pos) const {
  if (row_epoch == epoch) return true;
  if (row_epoch > epoch || flush_history.empty() || flush_history.front().first > row_epoch + 1) {
    return false;  // not this chain's, or older than the history
  }
  for (const auto& [started, kept] : flush_history) {
    if (started > row_epoch && pos >= kept) return false;
  }
  return true;
}

}  // namespace specline::scheduler
