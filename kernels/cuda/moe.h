// The row shuffles of a mixture-of-experts layer on the GPU: gathering the
// rows routed to one expert into a dense block (so one GEMM reads that
// expert's weights once for all of them), and adding each expert's output,
// weighted, back to its rows in an fp32 accumulator.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace specline::cuda {

// dst[j, :cols] = src[rows[j] * src_stride, :cols] for j < m (element type t).
void GatherRows(DType t, const void* src, int src_stride, const int32_t* rows, int m, int cols,
                void* dst, cudaStream_t stream);

// acc[rows[j], :cols] += weights[j] * src[j, :cols] for j < m. The rows of
// one call are distinct (an expert is picked at most once per row), so
// there are no races; calls run in stream order.
void ScatterAddScaled(DType t, const void* src, int m, int cols, const int32_t* rows,
                      const float* weights, float* acc, cudaStream_t stream);

}  // namespace specline::cuda
