// MatMul entry point: validates the weight descriptor and splits the rows of
// W across the pool. m = 1 takes the streaming GEMV, m > 1 the panel GEMM;
// both reduce every output in the same canonical order (simd.h), so the
// result does not depend on m, on the path, or on the thread count.
#include <stdexcept>
#include <string>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/ops.h"

namespace specline::kernels {

void MatMul(const WeightMatrix& w, const float* x, int64_t m, float* y,
            ThreadPool& pool) {
  if (m <= 0 || w.rows <= 0) return;
  const auto row = RowBytes(w.dtype, w.cols);
  if (!row || w.cols <= 0 || w.row_bytes < *row || w.data == nullptr) {
    throw std::invalid_argument(
        "MatMul: bad weight matrix (" + std::string(DTypeName(w.dtype)) +
        ", cols " + std::to_string(w.cols) + ", row_bytes " +
        std::to_string(w.row_bytes) + ")");
  }
  if (m == 1) {
    pool.ParallelFor(
        w.rows,
        [&](int64_t begin, int64_t end) { detail::GemvRange(w, x, y, begin, end); },
        detail::kRowGrain);
  } else {
    pool.ParallelFor(
        w.rows,
        [&](int64_t begin, int64_t end) { detail::GemmRange(w, x, m, y, begin, end); },
        detail::kRowGrain);
  }
}

}  // namespace specline::kernels
