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

}  // namespace specline
