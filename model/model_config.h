// The shape and numerics of a Llama-family decoder, independent of the file
// format it was read from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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

struct ModelConfig {
  std::string arch = "llama";  // "llama", "qwen2", "qwen3", "mistral"
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

  // Checks the numbers are consistent (positive, heads divide, ...). Returns
  // an empty string when valid, else what is wrong.
  std::string Validate() const;
};

// A Llama shape from its main numbers (head_dim = dim / n_heads; other
// fields at their defaults): for tests, benchmarks and random models.
ModelConfig LlamaShape(int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads,
                       int vocab_size, int max_seq_len);

// Karpathy's stories110M (dim 768, 12 layers, 12 heads, vocab 32000): the
// reference shape of the CPU decode benchmarks.
inline ModelConfig Stories110MShape() { return LlamaShape(768, 2048, 12, 12, 12, 32000, 1024); }

}  // namespace specline
