// cuda_bench's read-bandwidth probe: one kernel that only reads (16-byte
// loads, XOR-folded so the compiler keeps them) and writes nothing but an
// almost-never-taken sink. Batch-1 decode only reads its weights, so this,
// not a device copy (read + write), is the ceiling it is measured against.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace specline::cuda_bench {

// Enqueues one pass over `bytes` (a multiple of 16) at `src` on `stream`;
// `sink` is 4 bytes of device memory.
void EnqueueReadPass(const void* src, size_t bytes, unsigned* sink, cudaStream_t stream);

}  // namespace specline::cuda_bench
