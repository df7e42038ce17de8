// Entry points of the MatMul strategies, split by file: gemv.cc streams
// the weights once for a single activation row (decode), gemm.cc reuses a
// dequantized panel of weight rows across many activation rows (prefill).
// Both reduce each output with the canonical order of simd.h, so they agree
// bit for bit and MatMul may pick either for any m. Quantized weights take
// quant_matmul.cc's integer path instead (unless fp32 activations are
// asked for), whose GEMV and GEMM also agree bit for bit.
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

struct Q8Block;
struct Q8KBlock;

// The integer path for quantized W (quant_matmul.cc), x given as m rows of
// w.cols / 32 Q8 blocks each.
void QuantMatMulRange(const WeightMatrix& w, const Q8Block* x, int64_t m, float* y,
                      int64_t row_begin, int64_t row_end);

// The same for K-quant W (kquant_matmul.cc), x given as m rows of
// w.cols / 256 Q8_K blocks each.
void KQuantMatMulRange(const WeightMatrix& w, const Q8KBlock* x, int64_t m, float* y,
                       int64_t row_begin, int64_t row_end);

// Rows of W handed to one thread at a time by MatMul (a multiple of the
// register blocking of both kernels, so chunks split no register block).
constexpr int64_t kRowGrain = 24;

}  // namespace specline::kernels::detail
