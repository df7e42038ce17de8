// The two texts a suffix draft comes from (SAM-Decoding, Hu et al. 2024;
// SuffixDecoding, Oliaro et al. 2024): the request's own text, and the
// text of recent requests. Both answer the same question: the longest
// suffix of the context that occurred before, and what followed it.
//
// The request's own index learns from the model's output as it is
// accepted, so a model that repeats itself (a small model often does)
// drafts its repetition. The recent index carries that across requests:
// agents resend the same tool output, chat turns quote earlier replies,
// and a repeated prompt draws the same greedy reply. Drafts are guesses
// the target verifies, so neither changes an output; the recent index does
// make a request's speed depend on other requests' text, a timing channel
// (as for vLLM's suffix decoding and any shared prefix cache), so it is
// kept per cache scope (drafter_memory.h): a request drafts only from its
// own principal's (or share group's) texts.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <span>
#include <vector>

#include "model/drafters/suffix_automaton.h"

namespace specline {

struct SuffixDraft {
  std::vector<int32_t> tokens;
  int32_t match = 0;  // tokens of the context's tail that matched
};

// One request's text: the prompt, then every accepted token. Not
// thread-safe: one sequence drafts from it at a time.
class RequestSuffixIndex {
 public:
  // Up to n tokens that followed the latest earlier occurrence of the
  // longest suffix of `context` (at most `window` tokens long). The index
  // catches up with `context` first; a context that is not an extension of
  // what was indexed (a different request) is indexed afresh.
  SuffixDraft Draft(std::span<const int32_t> context, int window, int n);

  int64_t indexed() const { return automaton_.size(); }
  size_t bytes() const { return automaton_.bytes(); }

 private:
  // Indexes context[0, size - 1): the last token is the query's end, and
  // must match an occurrence that has a continuation.
  void CatchUp(std::span<const int32_t> context);

  SuffixAutomaton automaton_;
};

// Recent requests' texts, bounded: two generations of capacity / 2 tokens
// each; when the newer one fills, the older is dropped. Thread-safe:
// Remember takes the lock alone, Draft shares it.
class RecentTextIndex {
 public:
  explicit RecentTextIndex(int64_t capacity_tokens);

  int64_t capacity() const { return capacity_; }
  // A finished request's text (its last capacity / 2 tokens).
  void Remember(std::span<const int32_t> text);
  // As RequestSuffixIndex::Draft, over the remembered texts.
  SuffixDraft Draft(std::span<const int32_t> context, int window, int n) const;

  int64_t tokens() const;
  size_t bytes() const;

 private:
  const int64_t capacity_;
  mutable std::shared_mutex mu_;
  SuffixAutomaton newer_, older_;
  int32_t next_separator_ = -1;
};

}  // namespace specline
