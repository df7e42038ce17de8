// Entry points of the two MatMul strategies, split by file: gemv.cc streams
// the weights once for a single activation row (decode), gemm.cc reuses a
// dequantized panel of weight rows across many activation rows (prefill).
// Both reduce each output with the canonical order of simd.h, so they agree
// bit for bit and MatMul may pick either for any m.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace specline::kernels::detail {

// y[r] = dot(W[r], x) for r in [row_begin, row_end).
void GemvRange(const WeightMatrix& w, const float* x, float* y,
               int64_t row_begin, int64_t row_end);

// y[i, r] = dot(W[r], x[i]) for i < m and r in [row_begin, row_end).
void GemmRange(const WeightMatrix& w, const float* x, int64_t m, float* y,
               int64_t row_begin, int64_t row_end);

// Rows of W handed to one thread at a time by MatMul (a multiple of the
// register blocking of both kernels, so chunks split no register block).
constexpr int64_t kRowGrain = 24;

}  // namespace specline::kernels::detail
