// m = 1: each weight byte is read exactly once, decoded in registers and
// multiplied straight into the accumulators, so the kernel runs at memory
// bandwidth. Several rows are processed together: their accumulators form
// independent FMA chains (hiding the 4-cycle FMA latency) and they share each
// loaded x vector.
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/weight_codec.h"

namespace specline::kernels::detail {
namespace {

// Hardware prefetchers lose track of the R interleaved short row streams
// (a 768-column row is only 24-48 cache lines), so each step also prefetches
// the same offset in the rows `ahead` bytes further on (a whole number of
// R-row blocks, >= 32 KiB). Measured: cold 32000x768 F16 12 -> 14 GB/s,
// Q8_0 7 -> 11.5 GB/s; prefetching within the current rows did not help.
// Prefetches past the end of the matrix are harmless hints, never faults.
template <DType T, int R>
void GemvBlock(const uint8_t* w, int64_t row_bytes, int64_t ahead,
               const float* x, int64_t cols, float* y) {
  using C = Codec<T>;
  constexpr int kVecs = C::kStepElems / kLanes;
  // K-quants: kSub 32-element steps per stored super-block.
  constexpr int kSub = kSubSteps<T>;
  constexpr int64_t kBlockBytes = BlockBytesOf<T>();
  const int64_t blocks = cols / (C::kStepElems * kSub);
  Vec acc[R];
  for (int r = 0; r < R; ++r) acc[r] = VZero();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int j = 0; j < kSub; ++j) {
      const float* xs = x + (b * kSub + j) * C::kStepElems;
      Vec xv[kVecs];
      for (int i = 0; i < kVecs; ++i) xv[i] = VLoad(xs + i * kLanes);
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w + r * row_bytes + b * kBlockBytes;
        // A K-quant block (84-210 bytes) is read over 8 steps: prefetch its
        // lines ahead on every other one.
        if (kSub == 1 || j % 2 == 0) __builtin_prefetch(p + 64 * (j / 2) + ahead);
        Vec wv[kVecs];
        DecodeStep<T>(p, j, wv);
        for (int i = 0; i < kVecs; ++i) acc[r] = VFma(wv[i], xv[i], acc[r]);
      }
    }
  }
  if constexpr (kHasPartialSteps<T>) {
    const int rest = static_cast<int>(cols - blocks * C::kStepElems);
    if (rest > 0) {
      const Vec xv = VLoadPartial(x + blocks * C::kStepElems, rest);
      for (int r = 0; r < R; ++r) {
        const Vec wv = C::DecodePartial(w + r * row_bytes + blocks * C::kStepBytes, rest);
        acc[r] = VFma(wv, xv, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = Reduce(acc[r]);
}

// Rows per block: 4 chains suffice for one FMA per 8-element step; the
// quant types apply 4 FMAs per block to each accumulator, so they need more
// rows in flight to keep both FMA pipes busy.
constexpr int64_t kPrefetchBytes = 32 * 1024;

template <DType T>
constexpr int kGemvRows = Codec<T>::kStepElems == 8 ? 4 : 8;

template <DType T>
void GemvTyped(const WeightMatrix& w, const float* x, float* y,
               int64_t row_begin, int64_t row_end) {
  constexpr int R = kGemvRows<T>;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t block_bytes = R * w.row_bytes;
  const int64_t ahead = (kPrefetchBytes + block_bytes - 1) / block_bytes * block_bytes;
  int64_t r = row_begin;
  for (; r + R <= row_end; r += R) {
    GemvBlock<T, R>(base + r * w.row_bytes, w.row_bytes, ahead, x, w.cols, y + r);
  }
  for (; r < row_end; ++r) {
    GemvBlock<T, 1>(base + r * w.row_bytes, w.row_bytes, ahead, x, w.cols, y + r);
  }
}

}  // namespace

void GemvRange(const WeightMatrix& w, const float* x, float* y,
               int64_t row_begin, int64_t row_end) {
  switch (w.dtype) {
    case DType::kF32: return GemvTyped<DType::kF32>(w, x, y, row_begin, row_end);
    case DType::kF16: return GemvTyped<DType::kF16>(w, x, y, row_begin, row_end);
    case DType::kBF16: return GemvTyped<DType::kBF16>(w, x, y, row_begin, row_end);
    case DType::kQ8_0: return GemvTyped<DType::kQ8_0>(w, x, y, row_begin, row_end);
    case DType::kQ4_0: return GemvTyped<DType::kQ4_0>(w, x, y, row_begin, row_end);
    case DType::kQ4_1: return GemvTyped<DType::kQ4_1>(w, x, y, row_begin, row_end);
    case DType::kQ5_0: return GemvTyped<DType::kQ5_0>(w, x, y, row_begin, row_end);
    case DType::kQ5_1: return GemvTyped<DType::kQ5_1>(w, x, y, row_begin, row_end);
    case DType::kQ2_K: return GemvTyped<DType::kQ2_K>(w, x, y, row_begin, row_end);
    case DType::kQ3_K: return GemvTyped<DType::kQ3_K>(w, x, y, row_begin, row_end);
    case DType::kQ4_K: return GemvTyped<DType::kQ4_K>(w, x, y, row_begin, row_end);
    case DType::kQ5_K: return GemvTyped<DType::kQ5_K>(w, x, y, row_begin, row_end);
    case DType::kQ6_K: return GemvTyped<DType::kQ6_K>(w, x, y, row_begin, row_end);
  }
}

}  // namespace specline::kernels::detail
