// The training-free drafter the policies use: prompt lookup first, Token
// Recycling otherwise. Works on every model we serve, with no trained head.
//
// Why this order: a prompt-lookup match means the text is copying text
// already in the context (input-grounded output), where it is right for
// long runs; Token Recycling only knows one token of context, so it is the
// better guess only when nothing in the context matches. The other order
// (recycling first, lookup only for tokens never seen) is an option, so
// the two can be measured side by side: docs/drafters.md has the figures.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "model/drafters/token_recycling.h"

namespace specline {

struct TrainingFreeDrafterOptions {
  int32_t vocab_size = 0;  // the target model's
  int k = 8;               // candidates kept per token by Token Recycling
  int num_drafts = 4;      // default draft length of Propose
  int min_ngram = 2;       // prompt lookup's n-gram range
  int max_ngram = 4;
  bool use_prompt_lookup = true;
  bool use_token_recycling = true;
  // false: Token Recycling first, prompt lookup only when the last token
  // has no row (and no extension of lookup drafts).
  bool prefer_prompt_lookup = true;
  // A prompt-lookup draft clipped short by the end of the context is
  // continued by the Token Recycling chain from its last token.
  bool extend_lookup_with_recycling = true;
};

enum class DraftSource { kNone, kPromptLookup, kTokenRecycling };
const char* DraftSourceName(DraftSource s);

struct DraftProposal {
  std::vector<int32_t> tokens;
  DraftSource source = DraftSource::kNone;
};

// How many Propose calls each source answered, and the tokens it proposed.
struct DrafterCounters {
  int64_t prompt_lookup_drafts = 0;
  int64_t token_recycling_drafts = 0;
  int64_t empty_drafts = 0;
  int64_t prompt_lookup_tokens = 0;
  int64_t token_recycling_tokens = 0;  // extensions of lookup drafts included
};

class TrainingFreeDrafter {
 public:
  explicit TrainingFreeDrafter(const TrainingFreeDrafterOptions& options);

  const TrainingFreeDrafterOptions& options() const { return options_; }

  // Up to n draft tokens to follow `context` (n < 0: options.num_drafts).
  // Safe to call while another thread calls Observe.
  DraftProposal Propose(std::span<const int32_t> context, int n = -1) const;

  // The target model processed `input_token` and produced `logits_row`
  // (vocab_size entries): records its top-k in the recycling matrix.
  void Observe(int32_t input_token, std::span<const float> logits_row);
  // Same, from candidates the caller already ranked (best first).
  void ObserveTopK(int32_t input_token, std::span<const int32_t> top_candidates);

  DrafterCounters counters() const;

  TokenRecycling& recycling() { return recycling_; }
  const TokenRecycling& recycling() const { return recycling_; }

 private:
  // A Token Recycling chain into `d` (counted); false when it has none.
  bool RecyclingDraft(std::span<const int32_t> context, int n, DraftProposal& d) const;

  TrainingFreeDrafterOptions options_;
  TokenRecycling recycling_;
  // Relaxed atomics: Propose is const and may run beside Observe; the
  // counters are statistics, read without ordering.
  mutable std::atomic<int64_t> lookup_drafts_{0}, recycling_drafts_{0}, empty_drafts_{0};
  mutable std::atomic<int64_t> lookup_tokens_{0}, recycling_tokens_{0};
};

}  // namespace specline
