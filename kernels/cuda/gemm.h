// Matrix products of the GPU backend: y[m, rows] = x[m, cols] * W^T with W
// a [rows, cols] row-major weight (PyTorch Linear layout) of bf16 or fp16,
// x of the same type, y of that type or fp32 (logits), fp32 accumulation.
//
// Two paths, chosen per call by m:
// - m <= kGemvMaxRows: an own GEMV kernel (decode). Batch-1 decode is a pass
//   over the weights, so what counts is bytes per second: each warp streams
//   whole weight rows with 16-byte loads and keeps the m input rows in
//   registers, several loads in flight.
// - larger m: cuBLAS (GemmEx, fp32 compute), which picks tensor-core
//   kernels for prefill.
// Both are capturable in a CUDA graph (cuBLAS gets a fixed workspace).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/device_buffer.h"
#include "kernels/dtype.h"

namespace specline::cuda {

inline constexpr int kGemvMaxRows = 8;

struct DeviceMatrix {
  DType t = DType::kBF16;
  const void* data = nullptr;  // [rows, cols], contiguous
  int64_t rows = 0;
  int64_t cols = 0;
};

// Which implementation a Gemm uses for small m (benchmarks compare them).
enum class SmallMPath { kGemv, kCublas };

class Gemm {
 public:
  // Enqueues on `stream` (not owned).
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x * W^T; x is [m, w.cols] of w.t; y is [m, w.rows] of w.t, or fp32
  // when y_f32. Throws std::invalid_argument on a dtype other than bf16/fp16.
  void Run(const DeviceMatrix& w, const void* x, int64_t m, void* y, bool y_f32 = false);

  void set_small_m_path(SmallMPath p) { small_m_ = p; }
  cudaStream_t stream() const { return stream_; }

 private:
  void RunCublas(const DeviceMatrix& w, const void* x, int64_t m, void* y, bool y_f32);
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  SmallMPath small_m_ = SmallMPath::kGemv;
};

// The GEMV alone (m in [1, kGemvMaxRows]); Gemm::Run calls it.
void Gemv(const DeviceMatrix& w, const void* x, int m, void* y, bool y_f32, cudaStream_t stream);

}  // namespace specline::cuda
