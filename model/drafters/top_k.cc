#include "model/drafters/top_k.h"

#include <cassert>
#include <cmath>

namespace specline {

// One pass with a sorted buffer of the k best so far (k is small: 8 for
// Token Recycling). Almost every entry of a 50k-entry row fails the single
// comparison against the current k-th best, so the pass is bound by reading
// the row; a heap or std::partial_sort would do more work per entry and
// nth_element would need a copy of the row. Scanning ids in increasing
// order and inserting only on a strictly greater value keeps ties ordered
// by lower id without comparing ids.
int TopK(std::span<const float> logits, int k, std::span<int32_t> out) {
  assert(k >= 0 && out.size() >= static_cast<size_t>(k));
  if (k <= 0) return 0;
  constexpr int kStack = 64;
  float stack_vals[kStack];
  std::vector<float> heap_vals;
  float* vals = stack_vals;
  if (k > kStack) {
    heap_vals.resize(k);
    vals = heap_vals.data();
  }
  int m = 0;  // filled entries of vals/out, sorted best first
  const int32_t n = static_cast<int32_t>(logits.size());
  for (int32_t id = 0; id < n; ++id) {
    const float v = logits[id];
    if (m == k) {
      if (!(v > vals[k - 1])) continue;  // the common case; NaN fails too
    } else if (std::isnan(v)) {
      continue;
    }
    // Insert after every entry >= v (earlier ids win ties).
    int j = m < k ? m : k - 1;
    while (j > 0 && vals[j - 1] < v) {
      vals[j] = vals[j - 1];
      out[j] = out[j - 1];
      --j;
    }
    vals[j] = v;
    out[j] = id;
    if (m < k) ++m;
  }
  return m;
}

std::vector<int32_t> TopK(std::span<const float> logits, int k) {
  std::vector<int32_t> out(k > 0 ? k : 0);
  out.resize(TopK(logits, k, out));
  return out;
}

}  // namespace specline
