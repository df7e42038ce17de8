// m > 1: compute-bound. A thread walks its rows of W in panels small enough
// to stay in L2; non-fp32 panels are dequantized once into a thread-local
// fp32 buffer and then reused by every row of x. The register-blocked
// micro-kernel computes a 4 (x rows) x 3 (W rows) tile of dot products with
// 12 vector accumulators, loading 7 vectors per 12 FMAs.
//
// Each output is a full-length dot product reduced in the canonical order of
// simd.h (no splitting of the input dimension), which is what keeps GEMM and
// GEMV bit-identical. The price is that x and W rows are streamed over the
// whole input dimension per tile; with cols up to a few thousand a 4-row
// x block and a 3-row W group still fit in L1/L2.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/weight_codec.h"

namespace specline::kernels::detail {
namespace {

constexpr int kMr = 4;  // x rows per tile
constexpr int kNr = 3;  // W rows per tile

template <int MR, int NR>
void MicroKernel(const float* x, int64_t ldx, const float* w, int64_t ldw,
                 int64_t k, float* y, int64_t ldy) {
  Vec acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = VZero();
  const int64_t full = k / kLanes * kLanes;
  for (int64_t s = 0; s < full; s += kLanes) {
    Vec wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = VLoad(w + j * ldw + s);
    for (int i = 0; i < MR; ++i) {
      const Vec xv = VLoad(x + i * ldx + s);
      for (int j = 0; j < NR; ++j) acc[i][j] = VFma(wv[j], xv, acc[i][j]);
    }
  }
  const int rest = static_cast<int>(k - full);
  if (rest > 0) {
    // Zero lanes on both sides, matching GEMV's partial step exactly.
    Vec wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = VLoadPartial(w + j * ldw + full, rest);
    for (int i = 0; i < MR; ++i) {
      const Vec xv = VLoadPartial(x + i * ldx + full, rest);
      for (int j = 0; j < NR; ++j) acc[i][j] = VFma(wv[j], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = Reduce(acc[i][j]);
}

using Kernel = void (*)(const float*, int64_t, const float*, int64_t, int64_t,
                        float*, int64_t);

template <int MR, int... NRs>
constexpr auto KernelRow(std::integer_sequence<int, NRs...>) {
  return std::array<Kernel, kNr>{&MicroKernel<MR, NRs + 1>...};
}

template <int... MRs>
constexpr auto KernelTable(std::integer_sequence<int, MRs...>) {
  return std::array<std::array<Kernel, kNr>, kMr>{
      KernelRow<MRs + 1>(std::make_integer_sequence<int, kNr>())...};
}

// kKernels[mr - 1][nr - 1] handles an mr x nr tile (edges use smaller ones).
constexpr auto kKernels = KernelTable(std::make_integer_sequence<int, kMr>());

// Multiplies rows [0, m) of x by `panel_rows` W rows starting at `w` (fp32,
// stride ldw) into y columns starting at y.
void PanelTimesX(const float* w, int64_t ldw, int64_t panel_rows,
                 const float* x, int64_t m, int64_t k, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; i += kMr) {
    const int mr = static_cast<int>(std::min<int64_t>(kMr, m - i));
    for (int64_t j = 0; j < panel_rows; j += kNr) {
      const int nr = static_cast<int>(std::min<int64_t>(kNr, panel_rows - j));
      kKernels[mr - 1][nr - 1](x + i * k, k, w + j * ldw, ldw, k,
                               y + i * ldy + j, ldy);
    }
  }
}

// W rows per panel: ~192 KiB of fp32, within a 512 KiB+ L2 next to the x
// block, and a multiple of the tile width.
int64_t PanelRows(int64_t ldw) {
  const int64_t rows = (192 * 1024) / (ldw * static_cast<int64_t>(sizeof(float)));
  return std::clamp<int64_t>(rows / kNr * kNr, kNr, 96);
}

template <DType T>
void DecodePanel(const WeightMatrix& w, int64_t row, int64_t n, float* dst,
                 int64_t ldw) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < n; ++r) {
    DecodeRow<T>(base + (row + r) * w.row_bytes, w.cols, dst + r * ldw);
  }
}

void DecodePanelAny(const WeightMatrix& w, int64_t row, int64_t n, float* dst,
                    int64_t ldw) {
  switch (w.dtype) {
    case DType::kF32: return DecodePanel<DType::kF32>(w, row, n, dst, ldw);
    case DType::kF16: return DecodePanel<DType::kF16>(w, row, n, dst, ldw);
    case DType::kBF16: return DecodePanel<DType::kBF16>(w, row, n, dst, ldw);
    case DType::kQ8_0: return DecodePanel<DType::kQ8_0>(w, row, n, dst, ldw);
    case DType::kQ4_0: return DecodePanel<DType::kQ4_0>(w, row, n, dst, ldw);
    case DType::kQ4_1: return DecodePanel<DType::kQ4_1>(w, row, n, dst, ldw);
    case DType::kQ5_0: return DecodePanel<DType::kQ5_0>(w, row, n, dst, ldw);
    case DType::kQ5_1: return DecodePanel<DType::kQ5_1>(w, row, n, dst, ldw);
    case DType::kQ2_K: return DecodePanel<DType::kQ2_K>(w, row, n, dst, ldw);
    case DType::kQ3_K: return DecodePanel<DType::kQ3_K>(w, row, n, dst, ldw);
    case DType::kQ4_K: return DecodePanel<DType::kQ4_K>(w, row, n, dst, ldw);
    case DType::kQ5_K: return DecodePanel<DType::kQ5_K>(w, row, n, dst, ldw);
    case DType::kQ6_K: return DecodePanel<DType::kQ6_K>(w, row, n, dst, ldw);
  }
}

}  // namespace

void GemmRange(const WeightMatrix& w, const float* x, int64_t m, float* y,
               int64_t row_begin, int64_t row_end) {
  const int64_t k = w.cols;
  // fp32 rows whose stride is a whole number of floats are used in place.
  const bool in_place = w.dtype == DType::kF32 && w.row_bytes % sizeof(float) == 0;
  // Padded stride keeps every decoded row 64-byte aligned relative to the
  // buffer start (fewer cache-line splits in the micro-kernel).
  const int64_t ldw = in_place ? w.row_bytes / static_cast<int64_t>(sizeof(float))
                               : (k + 15) / 16 * 16;
  const int64_t panel = PanelRows(ldw);
  thread_local std::vector<float> buffer;
  if (!in_place && static_cast<int64_t>(buffer.size()) < panel * ldw) {
    buffer.resize(panel * ldw);
  }
  for (int64_t r = row_begin; r < row_end; r += panel) {
    const int64_t n = std::min(panel, row_end - r);
    const float* wp;
    if (in_place) {
      wp = reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) +
                                          r * w.row_bytes);
    } else {
      DecodePanelAny(w, r, n, buffer.data(), ldw);
      wp = buffer.data();
    }
    PanelTimesX(wp, ldw, n, x, m, k, y + r, w.rows);
  }
}

}  // namespace specline::kernels::detail
