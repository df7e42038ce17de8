// The Phi-3 and mixture-of-experts parts of the random model writer
// (random_model.cc): which configs each arch takes, the tensors an MoE layer
// has, and the fused or stacked form each file format stores them in.
// Internal to model/formats.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/formats/model_source.h"
#include "model/formats/random_model.h"

namespace specline {

bool IsPhi3OrMoeArch(const std::string& arch);
// Throws std::invalid_argument when `c` is not what its arch's Hugging Face
// class and GGUF architecture can hold (so every format means one model).
void CheckPhi3OrMoeConfig(const ModelConfig& c);

// The architecture name a GGUF file carries: Mixtral is "llama" with experts.
std::string GgufArchName(const ModelConfig& c);

// The canonical tensors in the form `format` stores them (q/k rows already in
// the file's RoPE layout): Phi-3 fuses q/k/v into self_attn.qkv_proj and
// gate/up into mlp.gate_up_proj; GGUF stacks each layer's experts into
// [E, rows, cols] mlp.experts.{gate,up,down}_proj.weight; Mixtral's Hugging
// Face files use block_sparse_moe names. Other tensors pass unchanged.
std::vector<RandomTensor> PackForFile(const ModelConfig& c, std::vector<RandomTensor> tensors,
                                      ModelFormat format);

// The model_type and the config.json fields Phi-3 and MoE add (experts,
// partial rotary, longrope), set into `j`.
void AddPhi3OrMoeHfConfig(const ModelConfig& c, nlohmann::ordered_json& j);

// Deterministic LongRoPE factors for random models: short ones near 1, long
// ones growing to 4 over the frequencies; the attention factor
// transformers derives from max_seq_len / original.
LongRopeScaling RandomLongRope(int rope_dim, int original_max_position, int max_seq_len);

// The metadata and extra tensors a GGUF file of this arch carries beyond the
// Llama keys random_model.cc writes.
class GgufWriter;
void AddPhi3OrMoeGguf(const ModelConfig& c, GgufWriter& w);

}  // namespace specline
