#include "model/formats/rope_layout.h"

#include <cstring>

namespace specline {

namespace {

void Permute(const void* src, void* dst, int64_t n_heads, int64_t head_dim,
             int64_t row_bytes, bool to_interleaved) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        int64_t inter = h * head_dim + 2 * i + j;
        int64_t halfrow = h * head_dim + j * half + i;
        int64_t from = to_interleaved ? halfrow : inter;
        int64_t to = to_interleaved ? inter : halfrow;
        std::memcpy(d + to * row_bytes, s + from * row_bytes, row_bytes);
      }
    }
  }
}

}  // namespace

void HalfToInterleavedRows(const void* src, void* dst, int64_t n_heads,
                           int64_t head_dim, int64_t row_bytes) {
  Permute(src, dst, n_heads, head_dim, row_bytes, true);
}

void InterleavedToHalfRows(const void* src, void* dst, int64_t n_heads,
                           int64_t head_dim, int64_t row_bytes) {
  Permute(src, dst, n_heads, head_dim, row_bytes, false);
}

}  // namespace specline
