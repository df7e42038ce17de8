// The integer path of MatMul for the 32-element block types
// (weight_units.h; the K-quants have kquant_matmul.cc): the
// activation rows arrive quantized to Q8 blocks, and each weight unit of 32
// levels meets them in int8 products. Decoding a quantized weight to fp32
// costs more arithmetic than the FMA it feeds, so the fp32 path (gemv.cc)
// was limited by that arithmetic; here a unit costs a handful of integer
// instructions and decode runs at memory bandwidth.
//
// Decode (m = 1) streams R weight rows at a time, sharing each activation
// block; calls of a few rows (verification) do the same for groups of rows,
// each block of weight rows read from memory once and reused from L1. A
// prefill (m > 16) unpacks a panel of weight rows into WeightUnits once,
// keeps it in L2 and runs every activation row against it. Both run DotUnit in the same
// order for each (weight row, activation row): identical bits for any m and
// any thread count.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/weight_units.h"

namespace specline::kernels::detail {
namespace {

// Same prefetch distance and reasoning as gemv.cc.
constexpr int64_t kPrefetchBytes = 32 * 1024;

// R weight rows against G activation rows (stride x_stride blocks, outputs
// stride ldy), the units unpacked in registers straight from the weights.
// R = kDecodeRows, G = 1 is the decode GEMV; a call of a few rows (a verification
// batch) runs R = 2, G = 4 over each block of weight rows while it is in L1,
// so the weights still come from memory once.
template <DType T, int R, int G>
void QDirectBlock(const uint8_t* w, int64_t row_bytes, int64_t ahead, const Q8Block* x,
                  int64_t x_stride, int64_t wblocks, float* y, int64_t ldy) {
  using U = Units<T>;
  RowAccumulator acc[G][R];
  for (int64_t b = 0; b < wblocks; ++b) {
    // Every cache line of the block.
    for (int r = 0; r < R; ++r) {
      for (int off = 0; off < U::kBlockBytes; off += 64) {
        __builtin_prefetch(w + r * row_bytes + b * U::kBlockBytes + off + ahead);
      }
    }
    typename U::Header header[R];
    for (int r = 0; r < R; ++r) U::LoadHeader(w + r * row_bytes + b * U::kBlockBytes, &header[r]);
    for (int u = 0; u < U::kUnitsPerBlock; ++u) {
      WeightUnit unit[R];
      for (int r = 0; r < R; ++r) {
        U::Load(w + r * row_bytes + b * U::kBlockBytes, u, header[r], &unit[r]);
      }
      for (int g = 0; g < G; ++g) {
        const Q8Block& xb = x[g * x_stride + b * U::kUnitsPerBlock + u];
        const Bytes32 xq = LoadBytes32(xb.q);
        const Vec xd = VSet1(xb.d);
        for (int r = 0; r < R; ++r) DotUnit<U::kOffsets, U::kSigned>(unit[r], xb, xq, xd, acc[g][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[g * ldy + r] = acc[g][r].Result();
}

// Rows [row_begin, row_end) of y for m activation rows, direct from the
// weights: each block of R weight rows meets the activation rows G at a time.
template <DType T, int R, int G>
void QDirectTyped(const WeightMatrix& w, const Q8Block* x, int64_t m, float* y,
                  int64_t row_begin, int64_t row_end) {
  using U = Units<T>;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t x_stride = w.cols / 32;  // activation blocks per row
  const int64_t wblocks = w.cols / (32 * U::kUnitsPerBlock);
  const int64_t block_bytes = R * w.row_bytes;
  const int64_t ahead = (kPrefetchBytes + block_bytes - 1) / block_bytes * block_bytes;
  auto rows = [&](const uint8_t* wr, int64_t i, float* yi, auto r_const, auto g_const) {
    QDirectBlock<T, decltype(r_const)::value, decltype(g_const)::value>(
        wr, w.row_bytes, ahead, x + i * x_stride, x_stride, wblocks, yi, w.rows);
  };
  using RFull = std::integral_constant<int, R>;
  using ROne = std::integral_constant<int, 1>;
  using GFull = std::integral_constant<int, G>;
  using GOne = std::integral_constant<int, 1>;
  for (int64_t r = row_begin; r < row_end; r += R) {
    const int64_t n = std::min<int64_t>(R, row_end - r);
    for (int64_t i = 0; i < m;) {
      const bool full_g = i + G <= m;
      if (n == R) {
        full_g ? rows(base + r * w.row_bytes, i, y + i * w.rows + r, RFull{}, GFull{})
               : rows(base + r * w.row_bytes, i, y + i * w.rows + r, RFull{}, GOne{});
      } else {
        for (int64_t rr = r; rr < r + n; ++rr) {
          full_g ? rows(base + rr * w.row_bytes, i, y + i * w.rows + rr, ROne{}, GFull{})
                 : rows(base + rr * w.row_bytes, i, y + i * w.rows + rr, ROne{}, GOne{});
        }
      }
      i += full_g ? G : 1;
    }
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
      for (int64_t b = 0; b < units / U::kUnitsPerBlock; ++b) {
        const uint8_t* block = row + b * U::kBlockBytes;
        typename U::Header header;
        U::LoadHeader(block, &header);
        for (int u = 0; u < U::kUnitsPerBlock; ++u) {
          U::Load(block, u, header, out + b * U::kUnitsPerBlock + u);
        }
      }
    }
    QPanelTimesX<U::kOffsets, U::kSigned>(buffer.data(), n, units, x, m, y + r, w.rows);
  }
}

}  // namespace

namespace {

// Up to this many activation rows, the direct kernel (weights unpacked in
// registers per group of rows) beats unpacking a panel to memory.
constexpr int64_t kDirectMaxRows = 16;

// Weight rows streamed together by decode (m = 1). Measured on cold
// 32000 x 768 GEMVs (1 thread, dev-cpu, 2026-11-24): Q4_0 and Q4_1 run best
// with 4 rows in flight (Q4_0 12.1 GB/s, 10.7 with 2), Q8_0, Q5_0 and Q5_1
// with 1 (Q8_0 14.0 GB/s against 10.7 with 4). The output bits do not
// depend on it.
template <DType T>
constexpr int kDecodeRows = T == DType::kQ4_0 || T == DType::kQ4_1 ? 4 : 1;

template <DType T>
void QuantMatMulTyped(const WeightMatrix& w, const Q8Block* x, int64_t m, float* y,
                      int64_t row_begin, int64_t row_end) {
  if (m == 1) return QDirectTyped<T, kDecodeRows<T>, 1>(w, x, m, y, row_begin, row_end);
  if (m <= kDirectMaxRows) return QDirectTyped<T, 2, 4>(w, x, m, y, row_begin, row_end);
  QGemmTyped<T>(w, x, m, y, row_begin, row_end);
}

}  // namespace

void QuantMatMulRange(const WeightMatrix& w, const Q8Block* x, int64_t m, float* y,
                      int64_t row_begin, int64_t row_end) {
  switch (w.dtype) {
#define SPECLINE_QUANT_CASE(T) \
  case DType::T: return QuantMatMulTyped<DType::T>(w, x, m, y, row_begin, row_end);
    SPECLINE_QUANT_CASE(kQ8_0)
    SPECLINE_QUANT_CASE(kQ4_0)
    SPECLINE_QUANT_CASE(kQ4_1)
    SPECLINE_QUANT_CASE(kQ5_0)
    SPECLINE_QUANT_CASE(kQ5_1)
#undef SPECLINE_QUANT_CASE
    default: return;  // float types: gemv.cc / gemm.cc; K-quants: kquant_matmul.cc
  }
}

}  // namespace specline::kernels::detail
