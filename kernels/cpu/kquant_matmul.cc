// The integer path of MatMul for K-quant weights (kquant_units.h): the
// activation rows arrive as Q8_K blocks (one scale per 256 elements), and a
// weight super-block meets one in int32, converted to float once.
//
// One kernel serves every m: R weight rows are unpacked in registers unit by
// unit and meet G activation rows. Decode (m = 1) streams 1 or 2 rows at a
// time (kDecodeRows). With more rows (verification batches, prefill), R = 2
// weight rows meet groups of G = 4 activation rows; the loops are blocked so that a
// panel of weight rows and a chunk of activation rows sit in L2 together,
// and the weights come from memory once. The per-(weight row, activation
// row) sequence of operations is the same in every case: identical bits for
// any m, any blocking and any thread count.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels/cpu/kquant_units.h"
#include "kernels/cpu/matmul_internal.h"

namespace specline::kernels::detail {
namespace {

// Same prefetch distance and reasoning as gemv.cc.
constexpr int64_t kPrefetchBytes = 32 * 1024;

template <DType T, int R, int G>
void KBlock(const uint8_t* w, int64_t row_bytes, int64_t ahead, const Q8KBlock* x,
            int64_t x_stride, int64_t sblocks, float* y, int64_t ldy) {
  using U = KUnits<T>;
  Vec acc[G][R];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) acc[g][r] = VZero();
  for (int64_t b = 0; b < sblocks; ++b) {
    if (ahead > 0) {
      for (int r = 0; r < R; ++r) {
        for (int off = 0; off < U::kBlockBytes; off += 64) {
          __builtin_prefetch(w + r * row_bytes + b * U::kBlockBytes + off + ahead);
        }
      }
    }
    KHeader header[R];
    for (int r = 0; r < R; ++r) U::LoadHeader(w + r * row_bytes + b * U::kBlockBytes, &header[r]);
    Lanes32 lanes[G][R];
    for (int g = 0; g < G; ++g)
      for (int r = 0; r < R; ++r) lanes[g][r] = LanesZero();
    // The 8 units, unrolled: shifts and masks are immediates.
    const auto unit = [&]<int j>(std::integral_constant<int, j>) {
      Bytes32 q[R];
      Scales16 s[R];
      for (int r = 0; r < R; ++r) {
        q[r] = U::template Levels<j>(w + r * row_bytes + b * U::kBlockBytes);
        s[r] = UnitScales<j>(header[r]);
      }
      for (int g = 0; g < G; ++g) {
        const Bytes32 xq = LoadBytes32(x[g * x_stride + b].q + 32 * j);
        for (int r = 0; r < R; ++r) lanes[g][r] = AddUnitDot(lanes[g][r], q[r], xq, s[r]);
      }
    };
    [&]<int... J>(std::integer_sequence<int, J...>) {
      (unit(std::integral_constant<int, J>{}), ...);
    }(std::make_integer_sequence<int, 8>{});
    for (int g = 0; g < G; ++g)
      for (int r = 0; r < R; ++r)
        acc[g][r] = FinishSuperBlock<T>(header[r], x[g * x_stride + b], lanes[g][r], acc[g][r]);
  }
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < R; ++r) y[g * ldy + r] = Reduce(acc[g][r]);
}

// Weight rows per panel and activation rows per chunk of the m > 1 loop:
// a panel of a 2048-column Q6_K matrix is 53 KiB, a chunk of 2048-column
// activations 146 KiB, both in L2.
constexpr int64_t kPanelRows = 32;
constexpr int64_t kChunkRows = 64;

template <DType T, int R, int G>
void KMatMulTyped(const WeightMatrix& w, const Q8KBlock* x, int64_t m, float* y,
                  int64_t row_begin, int64_t row_end) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t sblocks = w.cols / 256;  // also the activation blocks per row
  const int64_t block_bytes = R * w.row_bytes;
  // Prefetching ahead in the row stream pays for decode; with many
  // activation rows the weights are reused from L2 and it is skipped.
  const int64_t ahead =
      m == 1 ? (kPrefetchBytes + block_bytes - 1) / block_bytes * block_bytes : 0;
  auto rows = [&](int64_t r, int64_t i, auto r_const, auto g_const) {
    KBlock<T, decltype(r_const)::value, decltype(g_const)::value>(
        base + r * w.row_bytes, w.row_bytes, ahead, x + i * sblocks, sblocks, sblocks,
        y + i * w.rows + r, w.rows);
  };
  using RFull = std::integral_constant<int, R>;
  using ROne = std::integral_constant<int, 1>;
  using GFull = std::integral_constant<int, G>;
  using GOne = std::integral_constant<int, 1>;
  for (int64_t p = row_begin; p < row_end; p += kPanelRows) {
    const int64_t p_end = std::min(p + kPanelRows, row_end);
    for (int64_t c = 0; c < m; c += kChunkRows) {
      const int64_t c_end = std::min(c + kChunkRows, m);
      for (int64_t r = p; r < p_end; r += R) {
        const int64_t n = std::min<int64_t>(R, p_end - r);
        for (int64_t i = c; i < c_end;) {
          const bool full_g = i + G <= c_end;
          if (n == R) {
            full_g ? rows(r, i, RFull{}, GFull{}) : rows(r, i, RFull{}, GOne{});
          } else {
            for (int64_t rr = r; rr < r + n; ++rr) {
              full_g ? rows(rr, i, ROne{}, GFull{}) : rows(rr, i, ROne{}, GOne{});
            }
          }
          i += full_g ? G : 1;
        }
      }
    }
  }
}

// Weight rows streamed together by decode (m = 1). Measured on cold
// 32000 x 768 GEMVs (1 thread, dev-cpu, 2026-11-24): 4 rows in flight, as
// the 32-element types use, ran Q6_K at 8.5 GB/s against 15.7 with 2 rows
// and Q4_K at 9.6 against 12.7, although 4 rows cost no more in compute
// (hot in cache, all three within 5%); Q5_K did best with 1 row (12.6 GB/s,
// 10.7 with 2). The output bits do not depend on it.
template <DType T>
constexpr int kDecodeRows = T == DType::kQ5_K ? 1 : 2;

template <DType T>
void KMatMulDispatch(const WeightMatrix& w, const Q8KBlock* x, int64_t m, float* y,
                     int64_t row_begin, int64_t row_end) {
  if (m == 1) return KMatMulTyped<T, kDecodeRows<T>, 1>(w, x, m, y, row_begin, row_end);
  KMatMulTyped<T, 2, 4>(w, x, m, y, row_begin, row_end);
}

}  // namespace

void KQuantMatMulRange(const WeightMatrix& w, const Q8KBlock* x, int64_t m, float* y,
                       int64_t row_begin, int64_t row_end) {
  switch (w.dtype) {
    case DType::kQ2_K: return KMatMulDispatch<DType::kQ2_K>(w, x, m, y, row_begin, row_end);
    case DType::kQ3_K: return KMatMulDispatch<DType::kQ3_K>(w, x, m, y, row_begin, row_end);
    case DType::kQ4_K: return KMatMulDispatch<DType::kQ4_K>(w, x, m, y, row_begin, row_end);
    case DType::kQ5_K: return KMatMulDispatch<DType::kQ5_K>(w, x, m, y, row_begin, row_end);
    case DType::kQ6_K: return KMatMulDispatch<DType::kQ6_K>(w, x, m, y, row_begin, row_end);
    default: return;
  }
}

}  // namespace specline::kernels::detail
