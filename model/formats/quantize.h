// Encoding fp32 values into the weight dtypes (the GGML block layouts for the
// quantized ones), for the model writers. The reference rounding of ggml's
// quantize_row_*_ref (for the K-quants, ports of its scale searches), so
// files match what llama.cpp's tools would write: llama-quantize without an
// importance matrix writes the same bytes up to rare rounding ties
// (kquants_test measures it).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace specline {

// Encodes `n` fp32 values (a multiple of BlockElems(dtype)) as `dtype`. A
// matrix is encoded row after row, which is the same as encoding it whole
// because rows are a whole number of blocks. Throws std::invalid_argument
// when n is not.
std::vector<uint8_t> EncodeValues(DType dtype, const float* src, int64_t n);
// The same into `out`, which holds RowBytes(dtype, n) bytes. Encoding a
// matrix in runs of whole rows (e.g. on several threads) gives the same bytes.
void EncodeValuesInto(DType dtype, const float* src, int64_t n, uint8_t* out);

}  // namespace specline
