// Prompt lookup (n-gram) drafting, as vLLM's "ngram" speculative method:
// when the text being written repeats text already in the context (a
// summary quoting its input, an edit of given code, a repeated list), the
// tokens that followed the previous occurrence of the last few tokens are a
// good guess for what comes next.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specline {

// Finds an earlier occurrence of the context's last m tokens, for the
// largest m in [min_ngram, max_ngram] that has one, and among occurrences
// of that length the most recent; returns up to n tokens that followed it,
// clipped at the end of the context. Empty when nothing matches (or on
// n <= 0, min_ngram < 1, or max_ngram < min_ngram).
std::vector<int32_t> PromptLookup(std::span<const int32_t> context, int min_ngram, int max_ngram,
                                  int n);

}  // namespace specline
