// The mapping between llama.cpp's GGUF tensor names and the canonical Hugging
// Face names the runtime uses ("blk.3.attn_q.weight" <->
// "model.layers.3.self_attn.q_proj.weight").
#pragma once

#include <optional>
#include <string>

namespace specline {

// nullopt for names outside the Llama-family mapping (e.g. rope_freqs.weight).
std::optional<std::string> GgufToHfName(const std::string& gguf_name);
std::optional<std::string> HfToGgufName(const std::string& hf_name);

// The mapping of one GGUF architecture. Gemma 2 / 3 name their four layer
// norms differently: GGUF attn_norm, post_attention_norm, ffn_norm and
// post_ffw_norm are Hugging Face input_layernorm, post_attention_layernorm
// (the attention *output's* norm), pre_feedforward_layernorm and
// post_feedforward_layernorm. Other archs map as above.
std::optional<std::string> GgufToHfName(const std::string& gguf_name, const std::string& arch);
std::optional<std::string> HfToGgufName(const std::string& hf_name, const std::string& arch);

}  // namespace specline
