#include "model/drafters/prompt_lookup.h"

#include <algorithm>

namespace specline {

// One backward scan instead of one search per n-gram length: for every
// earlier end position e, the match length is how far context[..e] and the
// whole context agree going backwards, capped at max_ngram. Most positions
// fail on the first comparison (context[e] != last token), so the scan is
// about one compare per context token: a few microseconds for a few
// thousand tokens, every decode step, with no index to maintain (an
// incremental suffix structure would pay off only for contexts far longer
// than ours). Scanning from the end finds the most recent occurrence of each
// length first, so only a strictly longer match replaces the best, and a
// match of max_ngram ends the scan.
std::vector<int32_t> PromptLookup(std::span<const int32_t> context, int min_ngram, int max_ngram,
                                  int n) {
  const int64_t len = static_cast<int64_t>(context.size());
  if (n <= 0 || min_ngram < 1 || max_ngram < min_ngram || len < min_ngram + 1) return {};
  const int32_t* c = context.data();
  const int32_t last = c[len - 1];
  int64_t best_end = -1;  // end (inclusive) of the chosen earlier occurrence
  int best_len = 0;
  // e <= len - 2: the occurrence must be earlier than the suffix itself and
  // have at least one token after it.
  for (int64_t e = len - 2; e >= min_ngram - 1; --e) {
    if (c[e] != last) continue;
    const int limit = static_cast<int>(std::min<int64_t>(max_ngram, e + 1));
    int m = 1;
    while (m < limit && c[e - m] == c[len - 1 - m]) ++m;
    if (m > best_len && m >= min_ngram) {
      best_len = m;
      best_end = e;
      if (m == max_ngram) break;
    }
  }
  if (best_end < 0) return {};
  const int64_t begin = best_end + 1;
  const int64_t end = std::min<int64_t>(len, begin + n);
  return std::vector<int32_t>(c + begin, c + end);
}

}  // namespace specline
