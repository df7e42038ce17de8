// Views of a ModelSource's tensors in the form the kernels take: matrices
// stay in the memory map in their file dtype; small vectors (norms, biases)
// are decoded to fp32 once.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/formats/model_source.h"

namespace specline {

kernels::WeightMatrix MatrixOf(const TensorInfo& t);
std::vector<float> VectorOf(const TensorInfo& t);

// One decoder layer's weights.
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  kernels::WeightMatrix wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;      // empty without qkv bias
  std::vector<float> q_norm, k_norm;  // empty without q/k norm
  kernels::WeightMatrix w_gate, w_up, w_down;  // dense layers only
  // Gemma's norms of the attention and MLP outputs (config.post_norms);
  // empty otherwise.
  std::vector<float> post_attn_norm, post_ffw_norm;
  // Mixture of experts (config.IsMoe()): the router [n_experts, dim] and
  // each expert's matrices, views into the file's memory map.
  kernels::WeightMatrix router;
  std::vector<kernels::WeightMatrix> e_gate, e_up, e_down;

  // Reads layer `layer` (global index), checking every shape against config.
  static LayerWeights Load(const ModelSource& src, int layer);
  static void LoadExperts(const ModelSource& src, int layer, LayerWeights& w);
};

// "model.layers.{layer}.{suffix}"
std::string LayerTensorName(int layer, const std::string& suffix);

}  // namespace specline
