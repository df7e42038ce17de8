// MatMul entry point: validates the weight descriptor and splits the rows of
// W across the pool. m = 1 takes the streaming GEMV, m > 1 the panel GEMM;
// both reduce every output in the same canonical order (simd.h), so the
// result does not depend on m, on the path, or on the thread count.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/kquant_units.h"
#include "kernels/cpu/q8_activation.h"
#include "kernels/cpu/q8k_activation.h"
#include "kernels/cpu/weight_units.h"

namespace specline::kernels {
namespace {

bool DefaultQuantizedActivations() {
  const char* env = std::getenv("SPECLINE_FP32_ACTIVATIONS");
  return env == nullptr || std::string(env) == "0" || std::string(env).empty();
}

std::atomic<bool> quantized_activations{DefaultQuantizedActivations()};

// Rows of x quantized per call (Q8 blocks of 32, or Q8_K blocks of 256 for
// K-quant weights); a prefill chunk's rows in parallel.
template <typename Block, int kElems>
void QuantizeRows(const float* x, int64_t m, int64_t cols, std::vector<Block>& out,
                  ThreadPool& pool) {
  const int64_t blocks = cols / kElems;
  out.resize(m * blocks);
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if constexpr (kElems == 256) {
        detail::QuantizeQ8K(x + i * cols, cols, out.data() + i * blocks);
      } else {
        detail::QuantizeQ8(x + i * cols, cols, out.data() + i * blocks);
      }
    }
  };
  if (m * cols < (1 << 16)) {
    rows(0, m);
  } else {
    pool.ParallelFor(m, rows, 1);
  }
}

}  // namespace

void SetQuantizedActivations(bool on) { quantized_activations.store(on); }
bool QuantizedActivations() { return quantized_activations.load(); }

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
  const bool integer = detail::HasIntegerPath(w.dtype) && quantized_activations.load(std::memory_order_relaxed);
  if (integer && detail::IsKQuant(w.dtype)) {
    thread_local std::vector<detail::Q8KBlock> xk;
    QuantizeRows<detail::Q8KBlock, 256>(x, m, w.cols, xk, pool);
    const detail::Q8KBlock* q = xk.data();
    pool.ParallelFor(
        w.rows,
        [&](int64_t begin, int64_t end) { detail::KQuantMatMulRange(w, q, m, y, begin, end); },
        detail::kRowGrain);
    return;
  }
  if (integer) {
    thread_local std::vector<detail::Q8Block> xq;
    QuantizeRows<detail::Q8Block, 32>(x, m, w.cols, xq, pool);
    const detail::Q8Block* q = xq.data();
    pool.ParallelFor(
        w.rows,
        [&](int64_t begin, int64_t end) { detail::QuantMatMulRange(w, q, m, y, begin, end); },
        detail::kRowGrain);
    return;
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
