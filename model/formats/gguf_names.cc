#include "model/formats/gguf_names.h"

#include <cctype>
#include <string_view>

namespace specline {

namespace {

struct NamePair {
  std::string_view gguf;
  std::string_view hf;
};

// Whole-model tensors.
constexpr NamePair kGlobal[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

// Per-layer tensors: "blk.N.<gguf>" <-> "model.layers.N.<hf>".
constexpr NamePair kLayer[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    // Phi-3's fused projections (its fused gate/up is "ffn_up": the reader
    // renames by arch, the writer finds it here).
    {"attn_qkv", "self_attn.qkv_proj"},
    {"ffn_up", "mlp.gate_up_proj"},
    // Mixture of experts: the router and the [E, rows, cols] expert stacks.
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_exps", "mlp.experts.gate_proj"},
    {"ffn_up_exps", "mlp.experts.up_proj"},
    {"ffn_down_exps", "mlp.experts.down_proj"},
};

// Gemma's layer norms (gguf_names.h), tried before kLayer for those archs;
// ffn_norm is the entry that differs from kLayer.
constexpr NamePair kGemmaLayer[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

// Older Mixtral GGUF files: one matrix per expert, "blk.N.ffn_gate.E" <->
// "model.layers.N.mlp.experts.E.gate_proj".
constexpr NamePair kExpert[] = {
    {"ffn_gate.", "gate_proj"},
    {"ffn_up.", "up_proj"},
    {"ffn_down.", "down_proj"},
};

std::optional<std::string> MapExpert(std::string_view index, std::string_view rest,
                                     std::string_view suffix, bool to_hf) {
  if (!to_hf) return std::nullopt;  // writers emit the stacked form
  for (const NamePair& p : kExpert) {
    if (rest.substr(0, p.gguf.size()) != p.gguf) continue;
    std::string_view e = rest.substr(p.gguf.size());
    if (e.empty() || e.size() > 4) return std::nullopt;
    for (char ch : e) {
      if (!std::isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
    }
    return "model.layers." + std::string(index) + ".mlp.experts." + std::string(e) + "." +
           std::string(p.hf) + std::string(suffix);
  }
  return std::nullopt;
}

// Splits "<stem>.weight" / "<stem>.bias" into stem and suffix.
bool SplitSuffix(std::string_view name, std::string_view* stem,
                 std::string_view* suffix) {
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) {
      *stem = name.substr(0, name.size() - s.size());
      *suffix = s;
      return true;
    }
  }
  return false;
}

// Parses "<prefix>N.<rest>" with N a decimal layer index.
bool SplitLayer(std::string_view stem, std::string_view prefix,
                std::string_view* index, std::string_view* rest) {
  if (stem.substr(0, prefix.size()) != prefix) return false;
  stem.remove_prefix(prefix.size());
  size_t n = 0;
  while (n < stem.size() && std::isdigit(static_cast<unsigned char>(stem[n]))) ++n;
  if (n == 0 || n > 9 || n >= stem.size() || stem[n] != '.') return false;
  *index = stem.substr(0, n);
  *rest = stem.substr(n + 1);
  return true;
}

std::optional<std::string> Map(const std::string& name, bool to_hf, bool gemma = false) {
  std::string_view stem, suffix;
  if (!SplitSuffix(name, &stem, &suffix)) return std::nullopt;
  for (const NamePair& p : kGlobal) {
    if (stem == (to_hf ? p.gguf : p.hf)) {
      return std::string(to_hf ? p.hf : p.gguf) + std::string(suffix);
    }
  }
  std::string_view index, rest;
  if (!SplitLayer(stem, to_hf ? "blk." : "model.layers.", &index, &rest)) {
    return std::nullopt;
  }
  auto mapped = [&](const NamePair& p) {
    return std::string(to_hf ? "model.layers." : "blk.") + std::string(index) + "." +
           std::string(to_hf ? p.hf : p.gguf) + std::string(suffix);
  };
  if (gemma) {
    for (const NamePair& p : kGemmaLayer) {
      if (rest == (to_hf ? p.gguf : p.hf)) return mapped(p);
    }
  }
  for (const NamePair& p : kLayer) {
    if (rest == (to_hf ? p.gguf : p.hf)) {
      // kLayer's ffn_norm <-> post_attention_layernorm is not Gemma's.
      if (gemma && p.gguf == "ffn_norm") return std::nullopt;
      return mapped(p);
    }
  }
  return MapExpert(index, rest, suffix, to_hf);
}

bool IsGemma(const std::string& arch) { return arch == "gemma2" || arch == "gemma3"; }

}  // namespace

std::optional<std::string> GgufToHfName(const std::string& gguf_name) {
  return Map(gguf_name, true);
}

std::optional<std::string> HfToGgufName(const std::string& hf_name) {
  return Map(hf_name, false);
}

std::optional<std::string> GgufToHfName(const std::string& gguf_name, const std::string& arch) {
  return Map(gguf_name, true, IsGemma(arch));
}

std::optional<std::string> HfToGgufName(const std::string& hf_name, const std::string& arch) {
  return Map(hf_name, false, IsGemma(arch));
}

}  // namespace specline
