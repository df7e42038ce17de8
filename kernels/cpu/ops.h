// CPU kernels used by the model runtime. Every function is deterministic for a
// given thread count (each output element is reduced in a fixed order), so the
// same inputs give bit-identical outputs run to run.
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"

namespace specline::kernels {

// A read-only weight matrix W of shape [rows, cols], row-major: each output
// feature's `cols` input weights are one contiguous row (PyTorch Linear and
// GGUF layout). `data` usually points into a memory-mapped model file.
struct WeightMatrix {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  int64_t row_bytes = 0;  // bytes between consecutive rows
};

// y[m, w.rows] = x[m, w.cols] * W^T. x and y are dense row-major fp32.
// m = 1 is decode (bandwidth-bound GEMV); larger m is prefill (GEMM).
void MatMul(const WeightMatrix& w, const float* x, int64_t m, float* y,
            ThreadPool& pool);

// Quantized weights (Q8_0, Q4_0, Q4_1, ...) meet activations quantized to
// int8 per 32-element block, as in llama.cpp: integer dot products, decode
// at memory bandwidth. Off (or SPECLINE_FP32_ACTIVATIONS=1 in the
// environment), they are decoded to fp32 and meet fp32 activations: slower,
// closer to the unquantized model (docs/kernels.md has the figures).
// Process-wide; set it before serving, not while MatMuls run.
void SetQuantizedActivations(bool on);
bool QuantizedActivations();

// Decodes `n` elements (a multiple of BlockElems(t)) of type `t` into fp32.
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);

// out[i] = x[i] / rms(x) * weight[i], rms over n elements with eps.
void RmsNorm(const float* x, const float* weight, float eps, int64_t n,
             float* out);

// x[i] += y[i]
void AddInPlace(float* x, const float* y, int64_t n);

// gate[i] = silu(gate[i]) * up[i]
void SwiGlu(float* gate, const float* up, int64_t n);

// gate[i] = gelu_tanh(gate[i]) * up[i] (Gemma's GeGLU)
void GeGluTanh(float* gate, const float* up, int64_t n);

// x[i] = cap * tanh(x[i] / cap) (Gemma 2's soft-capping); nothing when cap <= 0.
void SoftCap(float* x, int64_t n, float cap);

// x[i] *= s
void Scale(float* x, int64_t n, float s);

// Numerically stable in-place softmax over n elements.
void Softmax(float* x, int64_t n);

// Dot product of two fp32 vectors.
float Dot(const float* a, const float* b, int64_t n);

// y[i] += a * x[i]
void Axpy(float a, const float* x, float* y, int64_t n);

// Conversions used by the loaders and kernels.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
float BF16ToF32(uint16_t h);
uint16_t F32ToBF16(float f);  // round to nearest even

}  // namespace specline::kernels
