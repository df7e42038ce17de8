// A model's weights on a GPU, in the backend's element type (bf16 or fp16):
// what CudaStageSlice and CudaOutputHead compute with.
//
// Matrices are converted once at load (whatever the file holds: f32, f16,
// bf16 or a GGML quantization, dequantized on the host) and fused where one
// GEMM can do the work of several: q, k and v into one [q+2kv, dim] matrix,
// gate and up into one [2 * hidden, dim] matrix. Norm weights and biases
// stay fp32.
//
// Random weights (benchmarks of 1B-7B shapes that no file need hold) are
// drawn on the device with the scales of model/formats/random_model.h, so
// activations stay of order one at any size.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/dtype.h"
#include "model/formats/model_source.h"
#include "model/model_config.h"

namespace specline::cuda {

// An owned [rows, cols] matrix of `t` on the device.
struct OwnedMatrix {
  DeviceBuffer buffer;
  DeviceMatrix view;  // points into buffer
};

struct DeviceLayerWeights {
  DeviceBuffer attn_norm, ffn_norm;  // fp32 [dim]
  OwnedMatrix wqkv;                  // [q_dim + 2 * kv_dim, dim]
  OwnedMatrix wo;                    // [dim, q_dim]
  OwnedMatrix w_gate_up;             // [2 * hidden_dim, dim]
  OwnedMatrix w_down;                // [dim, hidden_dim]
  DeviceBuffer bqkv;                 // fp32 [q_dim + 2 * kv_dim], empty without bias
  DeviceBuffer q_norm, k_norm;       // fp32 [head_dim], empty without q/k norm
  bool has_bias = false;
  bool has_qk_norm = false;
  // Gemma's norms of the attention and MLP outputs, fp32 [dim]; empty
  // without post-norms.
  DeviceBuffer post_attn_norm, post_ffw_norm;
  bool has_post_norms = false;
  // Mixture of experts (config.IsMoe(); w_gate_up and w_down stay empty):
  // the router [E, dim] and each expert's [2 h, dim] gate/up and [dim, h]
  // down; a token reads experts_used of them.
  OwnedMatrix router;
  std::vector<OwnedMatrix> e_gate_up, e_down;
  int experts_used = 0;

  // Bytes of the matrices (what one decode step reads from this layer).
  int64_t matrix_bytes() const;
};

// Loads layer `layer` of `src` (shapes checked against src.config()).
DeviceLayerWeights LoadLayer(const ModelSource& src, int layer, DType t);
// Random layer of `config`'s shape; `seed` and `layer` fix the values.
DeviceLayerWeights RandomLayer(const ModelConfig& config, int layer, DType t, uint64_t seed);

// A [rows, cols] matrix: from a source tensor (any dtype, converted), or
// random uniform in [-scale, scale).
OwnedMatrix LoadMatrix(const ModelSource& src, const std::string& name, int64_t rows,
                       int64_t cols, DType t);
OwnedMatrix RandomMatrix(int64_t rows, int64_t cols, DType t, uint64_t seed, float scale);

// fp32 vector on the device.
DeviceBuffer UploadFloats(const std::vector<float>& values);

// Bytes per element of a GPU element type (bf16/fp16: 2); throws otherwise.
int64_t ElementBytes(DType t);

}  // namespace specline::cuda
