#include "model/model_config.h"

#include <cmath>

namespace specline {

std::string ModelConfig::Validate() const {
  // Sizes beyond these are corrupt headers, not models; the bounds also keep
  // every product of two of them inside int64.
  constexpr int kMaxSize = 1 << 24;
  auto bad_size = [&](const char* name, int v) -> std::string {
    if (v <= 0 || v > kMaxSize) {
      return std::string(name) + " must be in [1, " + std::to_string(kMaxSize) +
             "], got " + std::to_string(v);
    }
    return "";
  };
  if (arch.empty()) return "arch is empty";
  for (auto [name, v] : {std::pair{"dim", dim},
                         {"hidden_dim", hidden_dim},
                         {"n_layers", n_layers},
                         {"n_heads", n_heads},
                         {"n_kv_heads", n_kv_heads},
                         {"head_dim", head_dim},
                         {"vocab_size", vocab_size},
                         {"max_seq_len", max_seq_len}}) {
    std::string e = bad_size(name, v);
    if (!e.empty()) return e;
  }
  if (n_heads % n_kv_heads != 0) {
    return "n_heads (" + std::to_string(n_heads) +
           ") is not a multiple of n_kv_heads (" + std::to_string(n_kv_heads) + ")";
  }
  if (head_dim % 2 != 0) {
    return "head_dim (" + std::to_string(head_dim) + ") must be even for RoPE";
  }
  if (!(std::isfinite(norm_eps) && norm_eps > 0.0f)) {
    return "norm_eps must be positive, got " + std::to_string(norm_eps);
  }
  if (!(std::isfinite(rope_theta) && rope_theta > 1.0f)) {
    return "rope_theta must be greater than 1, got " + std::to_string(rope_theta);
  }
  if (llama3_scaling) {
    const Llama3RopeScaling& s = *llama3_scaling;
    if (!(std::isfinite(s.factor) && s.factor > 0.0f)) {
      return "llama3 rope scaling factor must be positive";
    }
    if (!(std::isfinite(s.low_freq_factor) && std::isfinite(s.high_freq_factor) &&
          s.low_freq_factor > 0.0f && s.high_freq_factor > s.low_freq_factor)) {
      return "llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor";
    }
    if (s.original_max_position <= 0) {
      return "llama3 rope scaling original_max_position must be positive";
    }
  }
  if (std::string e = ValidateGemmaFields(); !e.empty()) return e;
  return ValidateExtensions();
}

// Phi-3 and mixture-of-experts fields.
std::string ModelConfig::ValidateExtensions() const {
  if (rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return "rope_dim (" + std::to_string(rope_dim) + ") must be even and at most head_dim";
  }
  if (longrope) {
    const size_t half = static_cast<size_t>(RopeDim() / 2);
    for (const auto* f : {&longrope->short_factors, &longrope->long_factors}) {
      if (f->size() != half) {
        return "longrope factors must have rope_dim/2 = " + std::to_string(half) +
               " values, got " + std::to_string(f->size());
      }
      for (float v : *f) {
        if (!(std::isfinite(v) && v > 0.0f)) return "longrope factors must be positive";
      }
    }
    if (longrope->original_max_position <= 0) {
      return "longrope original_max_position must be positive";
    }
    if (!(std::isfinite(longrope->attention_factor) && longrope->attention_factor > 0.0f)) {
      return "longrope attention_factor must be positive";
    }
  }
  if (n_experts < 0 || n_experts > 4096) {
    return "n_experts must be in [0, 4096], got " + std::to_string(n_experts);
  }
  if (n_experts > 0) {
    if (n_experts_used <= 0 || n_experts_used > n_experts) {
      return "n_experts_used (" + std::to_string(n_experts_used) + ") must be in [1, " +
             std::to_string(n_experts) + "]";
    }
    if (expert_hidden_dim <= 0 || expert_hidden_dim > (1 << 24)) {
      return "expert_hidden_dim must be in [1, 16777216], got " +
             std::to_string(expert_hidden_dim);
    }
  }
  if (qk_norm_full && !qk_norm) return "qk_norm_full needs qk_norm";
  return "";
}

ModelConfig LlamaShape(int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads,
                       int vocab_size, int max_seq_len) {
  ModelConfig c;
  c.dim = dim;
  c.hidden_dim = hidden_dim;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = n_heads > 0 ? dim / n_heads : 0;
  c.vocab_size = vocab_size;
  c.max_seq_len = max_seq_len;
  return c;
}

float ModelConfig::AttentionScale() const {
  const float s = query_pre_attn_scalar > 0.0f ? query_pre_attn_scalar
                                               : static_cast<float>(head_dim);
  return 1.0f / std::sqrt(s);
}

std::string ModelConfig::ValidateGemmaFields() const {
  for (auto [name, v] : {std::pair{"attn_softcap", attn_softcap},
                         {"final_softcap", final_softcap},
                         {"query_pre_attn_scalar", query_pre_attn_scalar},
                         {"rope_theta_local", rope_theta_local}}) {
    if (!(std::isfinite(v) && v >= 0.0f)) {
      return std::string(name) + " must be finite and >= 0, got " + std::to_string(v);
    }
  }
  if (rope_theta_local != 0.0f && rope_theta_local <= 1.0f) {
    return "rope_theta_local must be 0 (unset) or greater than 1";
  }
  if (!(std::isfinite(rope_linear_factor) && rope_linear_factor > 0.0f)) {
    return "rope_linear_factor must be positive";
  }
  if (sliding_window < 0 || swa_pattern < 0) {
    return "sliding_window and swa_pattern must be >= 0";
  }
  return "";
}

void ApplyGemmaArch(ModelConfig& c) {
  if (!IsGemmaArch(c.arch)) return;
  c.rope_style = RopeStyle::kHalf;  // llama.cpp runs every Gemma with NeoX RoPE
  c.qkv_bias = false;
  c.qk_norm = c.arch == "gemma3";
  c.scale_embeddings = true;
  c.gelu_mlp = true;
  c.post_norms = true;
}

}  // namespace specline
