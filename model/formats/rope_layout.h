// Conversion of q/k projection rows between the two RoPE layouts.
//
// RoPE rotates pairs of elements of each head. Hugging Face (rotate_half)
// pairs element i with i + head_dim/2; Meta's original code, llama2.c and
// GGUF "llama" tensors pair 2i with 2i+1. The same model is stored in either
// layout by reordering the output rows of W_q and W_k (and their biases)
// within each head:
//   interleaved row 2i     = half-layout row i
//   interleaved row 2i + 1 = half-layout row head_dim/2 + i
// which is llama.cpp's convert_hf_to_gguf permute,
// w.reshape(n_head, 2, head_dim/2, cols).swapaxes(1, 2).
#pragma once

#include <cstdint>

namespace specline {

// Reorders n_heads * head_dim rows of `row_bytes` bytes each from `src` into
// `dst` (which must not overlap). Rows are moved whole, so it works for any
// dtype, quantized ones included.
void HalfToInterleavedRows(const void* src, void* dst, int64_t n_heads,
                           int64_t head_dim, int64_t row_bytes);
void InterleavedToHalfRows(const void* src, void* dst, int64_t n_heads,
                           int64_t head_dim, int64_t row_bytes);

}  // namespace specline
