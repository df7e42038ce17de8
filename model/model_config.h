// The shape and numerics of a Llama-family decoder, independent of the file
// format it was read from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace specline {

// How RoPE pairs the elements of a head.
enum class RopeStyle : uint8_t {
  // Pairs (2i, 2i+1): Meta's original layout, llama2.c checkpoints and GGUF
  // "llama" tensors (llama.cpp's converter permutes q/k into this layout).
  kInterleaved,
  // Pairs (i, i + head_dim/2): Hugging Face's rotate_half, and GGUF archs that
  // llama.cpp runs with NeoX RoPE (qwen2, qwen3).
  kHalf,
};

// Llama 3.1 "rope_type": "llama3" frequency scaling.
struct Llama3RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// Phi-3 "longrope" (LongRoPE): each RoPE frequency theta^(-2i/rope_dim) is
// divided by a per-frequency factor, one set for contexts up to
// original_max_position and one for longer ones, and cos/sin are scaled by
// attention_factor (so q.k logits by its square), as transformers' Phi3
// rotary embedding and llama.cpp's rope_factors_{short,long} do.
struct LongRopeScaling {
  std::vector<float> short_factors;  // rope_dim / 2 each
  std::vector<float> long_factors;
  int original_max_position = 4096;
  float attention_factor = 1.0f;
};

// How a mixture-of-experts layer turns router logits into expert weights.
enum class MoeRouting : uint8_t {
  // softmax over all experts, then the top-k probabilities as they are
  // (OLMoE; Qwen3-MoE with norm_topk_prob false).
  kSoftmaxTopK,
  // softmax over all experts, top-k, renormalised to sum 1: Qwen3-MoE's
  // norm_topk_prob, and Mixtral's softmax over the top-k logits (the same
  // numbers).
  kSoftmaxTopKRenorm,
};

struct ModelConfig {
  std::string arch = "llama";  // "llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3"
  int dim = 0;                 // hidden size
  int hidden_dim = 0;          // MLP intermediate size
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // usually dim / n_heads; Qwen3 sets it explicitly
  int vocab_size = 0;
  int max_seq_len = 2048;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kHalf;
  std::optional<Llama3RopeScaling> llama3_scaling;
  bool tied_embeddings = false;  // lm_head shares the embedding matrix
  bool qkv_bias = false;         // Qwen2
  bool qk_norm = false;          // Qwen3: RMSNorm over each q and k head

  // Gemma 2 / 3 (docs/models.md). Every field below is off (0 / false / 1)
  // for the other architectures.
  bool scale_embeddings = false;  // token embeddings times sqrt(dim)
  bool gelu_mlp = false;          // GeGLU (gelu-tanh gate) instead of SwiGLU
  // RMSNorms of the attention output and of the MLP output, before each
  // residual add (Gemma's post_attention_norm / post_ffw_norm).
  bool post_norms = false;
  float attn_softcap = 0.0f;   // scores -> c * tanh(scores / c) when > 0
  float final_softcap = 0.0f;  // logits -> c * tanh(logits / c) when > 0
  // Attention scale 1/sqrt(query_pre_attn_scalar); 0 means head_dim.
  float query_pre_attn_scalar = 0.0f;
  // Sliding-window layers: a query at p sees keys (p - sliding_window, p].
  // Layer l slides when sliding_window > 0 and, with swa_pattern = n > 0,
  // l % n < n - 1 (llama.cpp's set_swa_pattern: Gemma 3 has 5 local layers
  // then 1 global, Gemma 2 alternates local and global).
  int sliding_window = 0;
  int swa_pattern = 0;
  // RoPE base of the sliding layers (0: rope_theta); Gemma 3's local layers
  // use 10000 while its global ones use rope_theta (1e6).
  float rope_theta_local = 0.0f;
  // Linear RoPE scaling ("rope_type": "linear") of the global layers only:
  // positions are divided by it (Gemma 3 4B+: 8).
  float rope_linear_factor = 1.0f;

  bool IsSlidingLayer(int layer) const {
    return sliding_window > 0 && swa_pattern > 0 && layer % swa_pattern < swa_pattern - 1;
  }
  // The window a layer's queries see (0: the whole causal prefix).
  int LayerWindow(int layer) const { return IsSlidingLayer(layer) ? sliding_window : 0; }
  float AttentionScale() const;
  // Phi-3 (appended: keep the fields above in their order).
  int rope_dim = 0;  // rotated dims per head (partial rotary); 0 = head_dim
  std::optional<LongRopeScaling> longrope;

  // Mixture of experts (n_experts > 0): every layer's MLP is n_experts
  // SwiGLU experts of expert_hidden_dim, n_experts_used picked per token.
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_hidden_dim = 0;
  MoeRouting moe_routing = MoeRouting::kSoftmaxTopK;
  // OLMoE: q_norm/k_norm are one RMSNorm over the whole q (k) projection,
  // not per head (requires qk_norm).
  bool qk_norm_full = false;

  int RopeDim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  bool IsMoe() const { return n_experts > 0; }

  // Checks the numbers are consistent (positive, heads divide, ...). Returns
  // an empty string when valid, else what is wrong.
  std::string Validate() const;
  // The part of Validate for the Gemma fields.
  std::string ValidateGemmaFields() const;
  std::string ValidateExtensions() const;  // the appended fields, for Validate
};

// A Llama shape from its main numbers (head_dim = dim / n_heads; other
// fields at their defaults): for tests, benchmarks and random models.
ModelConfig LlamaShape(int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads,
                       int vocab_size, int max_seq_len);

// Karpathy's stories110M (dim 768, 12 layers, 12 heads, vocab 32000): the
// reference shape of the CPU decode benchmarks.
inline ModelConfig Stories110MShape() { return LlamaShape(768, 2048, 12, 12, 12, 32000, 1024); }

// Sets the Gemma-specific fields of a config whose arch is "gemma2" or
// "gemma3" to the values those architectures always have (scaled
// embeddings, GeGLU, post-norms, NeoX RoPE, no qkv bias, q/k norm for
// gemma3), leaving the sizes and the per-model numbers (window, soft caps,
// RoPE bases) alone. A no-op for other archs.
void ApplyGemmaArch(ModelConfig& c);
inline bool IsGemmaArch(const std::string& arch) { return arch == "gemma2" || arch == "gemma3"; }

}  // namespace specline
