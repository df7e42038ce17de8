#include "model/runtime/weights.h"

#include "model/formats/arch_tensors.h"

namespace specline {

kernels::WeightMatrix MatrixOf(const TensorInfo& t) {
  kernels::WeightMatrix m;
  m.dtype = t.dtype;
  m.rows = t.rows();
  m.cols = t.cols();
  m.data = t.data;
  m.row_bytes = RowBytes(t.dtype, m.cols).value_or(0);
  if (t.shape.size() != 2 || m.row_bytes == 0) {
    throw ModelFormatError(t.file_path + ": tensor " + t.file_name +
                           " is not a matrix of whole blocks");
  }
  return m;
}

std::vector<float> VectorOf(const TensorInfo& t) {
  std::vector<float> v(t.numel());
  kernels::DequantizeRow(t.dtype, t.data, t.numel(), v.data());
  return v;
}

std::string LayerTensorName(int layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

void LayerWeights::LoadExperts(const ModelSource& src, int layer, LayerWeights& w) {
  const ModelConfig& c = src.config();
  const int64_t h = c.expert_hidden_dim;
  w.router = MatrixOf(src.Require(LayerTensorName(layer, "mlp.gate.weight"), {c.n_experts, c.dim}));
  for (int e = 0; e < c.n_experts; ++e) {
    w.e_gate.push_back(MatrixOf(src.Require(ExpertTensorName(layer, e, "gate_proj"), {h, c.dim})));
    w.e_up.push_back(MatrixOf(src.Require(ExpertTensorName(layer, e, "up_proj"), {h, c.dim})));
    w.e_down.push_back(MatrixOf(src.Require(ExpertTensorName(layer, e, "down_proj"), {c.dim, h})));
  }
}

LayerWeights LayerWeights::Load(const ModelSource& src, int layer) {
  const ModelConfig& c = src.config();
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  auto matrix = [&](const std::string& suffix, int64_t rows, int64_t cols) {
    return MatrixOf(src.Require(LayerTensorName(layer, suffix), {rows, cols}));
  };
  auto vector = [&](const std::string& suffix, int64_t n) {
    return VectorOf(src.Require(LayerTensorName(layer, suffix), {n}));
  };
  LayerWeights w;
  w.attn_norm = vector("input_layernorm.weight", c.dim);
  if (c.post_norms) {
    // Gemma's Hugging Face names: post_attention_layernorm is the norm of the
    // attention output; the MLP's input norm is pre_feedforward_layernorm.
    w.ffn_norm = vector("pre_feedforward_layernorm.weight", c.dim);
    w.post_attn_norm = vector("post_attention_layernorm.weight", c.dim);
    w.post_ffw_norm = vector("post_feedforward_layernorm.weight", c.dim);
  } else {
    w.ffn_norm = vector("post_attention_layernorm.weight", c.dim);
  }
  w.wq = matrix("self_attn.q_proj.weight", q_dim, c.dim);
  w.wk = matrix("self_attn.k_proj.weight", kv_dim, c.dim);
  w.wv = matrix("self_attn.v_proj.weight", kv_dim, c.dim);
  w.wo = matrix("self_attn.o_proj.weight", c.dim, q_dim);
  if (c.qkv_bias) {
    w.bq = vector("self_attn.q_proj.bias", q_dim);
    w.bk = vector("self_attn.k_proj.bias", kv_dim);
    w.bv = vector("self_attn.v_proj.bias", kv_dim);
  }
  if (c.qk_norm) {
    w.q_norm = vector("self_attn.q_norm.weight", c.qk_norm_full ? q_dim : c.head_dim);
    w.k_norm = vector("self_attn.k_norm.weight", c.qk_norm_full ? kv_dim : c.head_dim);
  }
  if (c.IsMoe()) {
    LoadExperts(src, layer, w);
    return w;
  }
  w.w_gate = matrix("mlp.gate_proj.weight", c.hidden_dim, c.dim);
  w.w_up = matrix("mlp.up_proj.weight", c.hidden_dim, c.dim);
  w.w_down = matrix("mlp.down_proj.weight", c.dim, c.hidden_dim);
  return w;
}

}  // namespace specline
