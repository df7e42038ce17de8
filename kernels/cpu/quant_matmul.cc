// The integer path of MatMul for quantized weights (weight_units.h): the
// activation rows arrive quantized to Q8 blocks, and each weight unit of 32
// levels meets them in int8 products. Decoding a quantized weight to fp32
// costs more arithmetic than the FMA it feeds, so the fp32 path (gemv.cc)
// was limited by that arithmetic; here a unit costs a handful of integer
// instructions and decode runs at memory bandwidth.
//
// GEMV streams R weight rows at a time, sharing each activation block. GEMM
// (m > 1) unpacks a panel of weight rows into WeightUnits once, keeps it in
// L2 and runs every activation row against it, so a verification batch of a
// few rows reads the weights from memory once. Both run DotUnit in the same
// order for each (weight row, activation row): identical bits for any m and
// any thread count.
#include <algorithm>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/weight_units.h"

namespace specline::kernels::detail {
namespace {

// Same prefetch distance and reasoning as gemv.cc.
constexpr int64_t kPrefetchBytes = 32 * 1024;

template <DType T, int R>
void QGemvBlock(const uint8_t* w, int64_t row_bytes, int64_t ahead, const Q8Block* x,
                int64_t wblocks, float* y) {
  using U = Units<T>;
  RowAccumulator acc[R];
  for (int64_t b = 0; b < wblocks; ++b) {
    for (int r = 0; r < R; ++r) __builtin_prefetch(w + r * row_bytes + b * U::kBlockBytes + ahead);
    for (int u = 0; u < U::kUnitsPerBlock; ++u) {
      const Q8Block& xb = x[b * U::kUnitsPerBlock + u];
      const Bytes32 xq = LoadBytes32(xb.q);
      const Vec xd = VSet1(xb.d);
      for (int r = 0; r < R; ++r) {
        WeightUnit unit;
        U::Load(w + r * row_bytes + b * U::kBlockBytes, u, &unit);
        DotUnit<U::kOffsets, U::kSigned>(unit, xb, xq, xd, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = acc[r].Result();
}

constexpr int kGemvRows = 4;

template <DType T>
void QGemvTyped(const WeightMatrix& w, const Q8Block* x, float* y, int64_t row_begin,
                int64_t row_end) {
  using U = Units<T>;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t wblocks = w.cols / (32 * U::kUnitsPerBlock);
  const int64_t block_bytes = kGemvRows * w.row_bytes;
  const int64_t ahead = (kPrefetchBytes + block_bytes - 1) / block_bytes * block_bytes;
  int64_t r = row_begin;
  for (; r + kGemvRows <= row_end; r += kGemvRows) {
    QGemvBlock<T, kGemvRows>(base + r * w.row_bytes, w.row_bytes, ahead, x, wblocks, y + r);
  }
  for (; r < row_end; ++r) {
    QGemvBlock<T, 1>(base + r * w.row_bytes, w.row_bytes, ahead, x, wblocks, y + r);
  }
}

// GEMM tile: MR activation rows x NR unpacked weight rows, MR * NR
// independent accumulator chains sharing each unit and block load.
constexpr int kMr = 2;
constexpr int kNr = 4;

template <Offsets kOffsets, bool kSigned, int MR, int NR>
void QTile(const WeightUnit* panel, int64_t units, const Q8Block* x, int64_t x_stride,
           float* y, int64_t ldy) {
  RowAccumulator acc[MR][NR];
  for (int64_t u = 0; u < units; ++u) {
    for (int i = 0; i < MR; ++i) {
      const Q8Block& xb = x[i * x_stride + u];
      const Bytes32 xq = LoadBytes32(xb.q);
      const Vec xd = VSet1(xb.d);
      for (int j = 0; j < NR; ++j) {
        DotUnit<kOffsets, kSigned>(panel[j * units + u], xb, xq, xd, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) y[i * ldy + j] = acc[i][j].Result();
}

template <Offsets kOffsets, bool kSigned>
void QPanelTimesX(const WeightUnit* panel, int64_t panel_rows, int64_t units, const Q8Block* x,
                  int64_t m, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; i += kMr) {
    const bool full_m = i + kMr <= m;
    for (int64_t j = 0; j < panel_rows; j += kNr) {
      const WeightUnit* p = panel + j * units;
      const Q8Block* xi = x + i * units;
      float* yij = y + i * ldy + j;
      if (full_m && j + kNr <= panel_rows) {
        QTile<kOffsets, kSigned, kMr, kNr>(p, units, xi, units, yij, ldy);
        continue;
      }
      // Edges: one pair at a time, the same DotUnit sequence.
      for (int64_t ii = 0; ii < std::min<int64_t>(kMr, m - i); ++ii)
        for (int64_t jj = 0; jj < std::min<int64_t>(kNr, panel_rows - j); ++jj)
          QTile<kOffsets, kSigned, 1, 1>(p + jj * units, units, xi + ii * units, units,
                                         yij + ii * ldy + jj, ldy);
    }
  }
}

template <DType T>
void QGemmTyped(const WeightMatrix& w, const Q8Block* x, int64_t m, float* y, int64_t row_begin,
                int64_t row_end) {
  using U = Units<T>;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t units = w.cols / 32;
  // ~256 KiB of unpacked units per panel, a multiple of the tile width.
  const int64_t row_unit_bytes = units * static_cast<int64_t>(sizeof(WeightUnit));
  const int64_t panel = std::clamp<int64_t>((256 * 1024) / row_unit_bytes / kNr * kNr, kNr, 64);
  thread_local std::vector<WeightUnit> buffer;
  if (static_cast<int64_t>(buffer.size()) < panel * units) buffer.resize(panel * units);
  for (int64_t r = row_begin; r < row_end; r += panel) {
    const int64_t n = std::min(panel, row_end - r);
    for (int64_t rr = 0; rr < n; ++rr) {
      const uint8_t* row = base + (r + rr) * w.row_bytes;
      WeightUnit* out = buffer.data() + rr * units;
      for (int64_t u = 0; u < units; ++u) {
        U::Load(row + (u / U::kUnitsPerBlock) * U::kBlockBytes,
                static_cast<int>(u % U::kUnitsPerBlock), out + u);
      }
    }
    QPanelTimesX<U::kOffsets, U::kSigned>(buffer.data(), n, units, x, m, y + r, w.rows);
  }
}

}  // namespace

void QuantGemvRange(const WeightMatrix& w, const Q8Block* x, float* y, int64_t row_begin,
                    int64_t row_end) {
  switch (w.dtype) {
    case DType::kQ8_0: return QGemvTyped<DType::kQ8_0>(w, x, y, row_begin, row_end);
    case DType::kQ4_0: return QGemvTyped<DType::kQ4_0>(w, x, y, row_begin, row_end);
    case DType::kQ4_1: return QGemvTyped<DType::kQ4_1>(w, x, y, row_begin, row_end);
    default: return;  // MatMul sends only HasIntegerPath types here
  }
}

void QuantGemmRange(const WeightMatrix& w, const Q8Block* x, int64_t m, float* y,
                    int64_t row_begin, int64_t row_end) {
  switch (w.dtype) {
    case DType::kQ8_0: return QGemmTyped<DType::kQ8_0>(w, x, m, y, row_begin, row_end);
    case DType::kQ4_0: return QGemmTyped<DType::kQ4_0>(w, x, m, y, row_begin, row_end);
    case DType::kQ4_1: return QGemmTyped<DType::kQ4_1>(w, x, m, y, row_begin, row_end);
    default: return;
  }
}

}  // namespace specline::kernels::detail
