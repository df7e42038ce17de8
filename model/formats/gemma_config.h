// Gemma 2 / 3 specifics of the model formats: the config fields that only
// these architectures have (sliding windows, soft caps, RoPE bases, the
// attention scalar), read from GGUF metadata or a Hugging Face config.json.
// Internal to model/formats.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/formats/gguf.h"
#include "model/model_config.h"

namespace specline {

// Fills the Gemma fields of `c` (whose arch, sizes, rope_theta and eps are
// already read) from the "{arch}.*" keys of a GGUF file, the way llama.cpp's
// gemma2 / gemma3 loaders do. Throws ModelFormatError naming `path` and the
// key for a value it cannot use.
void ReadGemmaGgufConfig(const GgufFile& file, const std::string& path, ModelConfig& c);

// Writes the keys ReadGemmaGgufConfig reads back (for the GGUF writer of
// random models).
class GgufWriter;
void WriteGemmaGgufConfig(const ModelConfig& c, GgufWriter& w);

// llama.cpp's attention scalar for a Gemma of `n_layers` layers: dim /
// n_heads for the 27B models (46 layers for Gemma 2, 62 for Gemma 3), else
// head_dim (0, i.e. the default). GGUF files carry no key for it.
float GemmaQueryPreAttnScalar(const ModelConfig& c);

// Fills the Gemma fields from a transformers Gemma2Config / Gemma3TextConfig
// (model_type "gemma2" / "gemma3_text"): sliding_window, layer_types or
// sliding_window_pattern, rope_local_base_freq, query_pre_attn_scalar, the
// soft caps and linear rope_scaling. Throws ModelFormatError naming `path`.
void ReadGemmaHfConfig(const nlohmann::json& j, const std::string& path, ModelConfig& c);

}  // namespace specline
