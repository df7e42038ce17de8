// Top-k token ids of one logits row. The Token Recycling matrix is fed with
// the k best candidates at every position the target model processes, so
// this runs once per logits row the scheduler already holds: it must cost
// about one read of the row, not a sort of the vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specline {

// Writes the ids of the min(k, non-NaN entries) largest logits to `out`,
// best first; equal logits are ordered by the lower id first (the greedy
// sampler's argmax rule, so TopK(row)[0] is the greedy token). NaNs are
// skipped. Returns how many ids were written (out.size() must be >= k).
int TopK(std::span<const float> logits, int k, std::span<int32_t> out);

// Same, as a vector.
std::vector<int32_t> TopK(std::span<const float> logits, int k);

}  // namespace specline
