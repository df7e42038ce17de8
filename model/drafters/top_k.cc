#include "model/drafters/top_k.h"

#include <cassert>
#include <cmath>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace specline {

// One pass with a sorted buffer of the k best so far (k is small: 8 for
// Token Recycling). Almost every entry of a 50k-entry row fails the
// comparison against the current k-th best, so the pass can be bound by
// reading the row; a heap or std::partial_sort would do more work per entry and
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
  const float* row = logits.data();
  auto consider = [&](int32_t id) {
    const float v = row[id];
    if (m == k) {
      if (!(v > vals[k - 1])) return;  // the common case; NaN fails too
    } else if (std::isnan(v)) {
      return;
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
  };
  int32_t id = 0;
  for (; id < n && m < k; ++id) consider(id);
  // Once k entries are held, a block of 16 is looked at entry by entry only
  // when one of them beats the k-th best (the threshold only rises, so a
  // block it rejects holds no winner). With AVX the test is two vector
  // compares, which makes the pass about a read of the row: 4x faster than
  // the scalar loop on a 49152-entry row. Left to the compiler, the same
  // test vectorised at -O2 but not at -O3 (GCC 12), hence the intrinsics.
  constexpr int32_t kBlock = 16;
  for (; id + kBlock <= n; id += kBlock) {
#if defined(__AVX__)
    const __m256 threshold = _mm256_set1_ps(vals[k - 1]);
    const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(row + id), threshold, _CMP_GT_OQ);
    const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(row + id + 8), threshold, _CMP_GT_OQ);
    if (_mm256_movemask_ps(_mm256_or_ps(a, b)) == 0) continue;  // NaN compares false
#else
    const float threshold = vals[k - 1];
    int hits = 0;
    for (int32_t j = 0; j < kBlock; ++j) hits += row[id + j] > threshold;
    if (hits == 0) continue;
#endif
    for (int32_t j = 0; j < kBlock; ++j) consider(id + j);
  }
  for (; id < n; ++id) consider(id);
  return m;
}

std::vector<int32_t> TopK(std::span<const float> logits, int k) {
  std::vector<int32_t> out(k > 0 ? k : 0);
  out.resize(TopK(logits, k, out));
  return out;
}

}  // namespace specline
