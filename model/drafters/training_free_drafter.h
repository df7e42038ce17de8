// The training-free drafter the policies use: a suffix match first (the
// request's own text, or recent requests' text when that matches longer),
// Token Recycling otherwise. Works on every model we serve, with no trained
// head.
//
// Why this order: a suffix match means the text is copying text already
// seen (input-grounded output, or the model repeating itself), where it is
// right for long runs; Token Recycling only knows one token of context, so
// it is the better guess only when nothing matches. The request's own text
// is searched with a suffix automaton when the caller keeps one per request
// (RequestSuffixIndex), else with prompt lookup's n-gram scan. The other order
// (recycling first, lookup only for tokens never seen) is an option, so
// the two can be measured side by side: docs/drafters.md has the figures.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "model/drafters/drafter_memory.h"
#include "model/drafters/suffix_index.h"
#include "model/drafters/token_recycling.h"

namespace specline {

struct TrainingFreeDrafterOptions {
  int32_t vocab_size = 0;  // the target model's
  int k = 8;               // candidates kept per token by Token Recycling
  int num_drafts = 4;      // default draft length of Propose
  int min_ngram = 2;       // shortest match drafted from the request's own text;
  int max_ngram = 4;       // prompt lookup's longest n-gram (the automaton has no limit)
  // The request's own text through its suffix automaton (when the caller
  // passes one), else prompt lookup.
  bool use_suffix_automaton = true;
  int suffix_window = 32;  // the longest suffix of the context matched
  // Recent requests' texts remembered for drafting, per cache scope (0:
  // none), and the shortest match drafted from them (a short match among
  // many texts is a weaker guess than the model's own top token, Token
  // Recycling's).
  int64_t recent_tokens = int64_t{1} << 18;
  int recent_min_match = 3;
  // What every scope's memory (recent texts and Token Recycling matrix)
  // may hold together; least recently used scopes are dropped past it.
  int64_t memory_mib = 512;
  bool use_prompt_lookup = true;
  bool use_token_recycling = true;
  // false: Token Recycling first, prompt lookup only when the last token
  // has no row (and no extension of lookup drafts).
  bool prefer_prompt_lookup = true;
  // A prompt-lookup draft clipped short by the end of the context is
  // continued by the Token Recycling chain from its last token.
  bool extend_lookup_with_recycling = true;
};

// kPromptLookup: the request's own text (automaton or n-gram scan).
enum class DraftSource { kNone, kPromptLookup, kRecentRequests, kTokenRecycling };
const char* DraftSourceName(DraftSource s);

struct DraftProposal {
  std::vector<int32_t> tokens;
  DraftSource source = DraftSource::kNone;
  // A suffix source's match: how many of the context's last tokens the
  // drafted continuation followed before (0 for Token Recycling). A long
  // match is right far more often than a short one.
  int match = 0;
};

// How many Propose calls each source answered, and the tokens it proposed.
struct DrafterCounters {
  int64_t prompt_lookup_drafts = 0;
  int64_t token_recycling_drafts = 0;
  int64_t empty_drafts = 0;
  int64_t recent_requests_drafts = 0;
  int64_t prompt_lookup_tokens = 0;
  int64_t recent_requests_tokens = 0;
  int64_t token_recycling_tokens = 0;  // extensions of lookup drafts included
};

class TrainingFreeDrafter {
 public:
  explicit TrainingFreeDrafter(const TrainingFreeDrafterOptions& options);

  const TrainingFreeDrafterOptions& options() const { return options_; }

  // What requests of cache scope `scope` draft from and teach: recent texts
  // and the Token Recycling matrix of that scope alone (drafter_memory.h
  // says why). A request looks its scope up once and keeps the pointer.
  std::shared_ptr<DrafterMemory> MemoryFor(std::string_view scope) {
    return scopes_.For(scope);
  }
  const DrafterMemoryScopes& scopes() const { return scopes_; }

  // Up to n draft tokens to follow `context` (n < 0: options.num_drafts)
  // from `memory` and the request's own text. `own`: the request's suffix
  // index, kept by the caller across the request's calls (null: prompt
  // lookup searches the context instead). Safe to call while another
  // thread calls Observe or Remember.
  DraftProposal Propose(const DrafterMemory& memory, std::span<const int32_t> context, int n = -1,
                        RequestSuffixIndex* own = nullptr) const;

  // A finished request's text, for later requests of its scope.
  void Remember(DrafterMemory& memory, std::span<const int32_t> text);

  // The target model processed `input_token` and produced `logits_row`
  // (vocab_size entries): records its top-k in the scope's matrix.
  void Observe(DrafterMemory& memory, int32_t input_token, std::span<const float> logits_row);
  // Same, from candidates the caller already ranked (best first).
  void ObserveTopK(DrafterMemory& memory, int32_t input_token,
                   std::span<const int32_t> top_candidates);

  DrafterCounters counters() const;

 private:
  // A Token Recycling chain into `d` (counted); false when it has none.
  bool RecyclingDraft(const TokenRecycling& recycling, std::span<const int32_t> context, int n,
                      DraftProposal& d) const;
  // A suffix match's continuation into `d` (counted): the request's own
  // text, or recent requests' when they match longer; false when neither
  // matches.
  bool SuffixMatchDraft(const RecentTextIndex& recent, std::span<const int32_t> context, int n,
                        RequestSuffixIndex* own, DraftProposal& d) const;

  TrainingFreeDrafterOptions options_;
  DrafterMemoryScopes scopes_;
  // Relaxed atomics: Propose is const and may run beside Observe; the
  // counters are statistics, read without ordering.
  mutable std::atomic<int64_t> lookup_drafts_{0}, recent_drafts_{0}, recycling_drafts_{0},
      empty_drafts_{0};
  mutable std::atomic<int64_t> lookup_tokens_{0}, recent_tokens_{0}, recycling_tokens_{0};
};

}  // namespace specline
