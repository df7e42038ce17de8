// Architecture-specific tensor layouts shown under the canonical per-matrix
// names the runtime loads, without copying: a fused or stacked tensor is a
// run of whole rows per part, so each part is a view (pointer + shape) into
// the same memory map. Everything downstream (validation, the CPU and CUDA
// loaders, stage slices) then sees one layout for every format.
#pragma once

#include <map>
#include <string>

#include "model/formats/tensor_info.h"
#include "model/model_config.h"

namespace specline {

// Replaces, in `tensors` (canonical name -> tensor), per layer N:
//  - Phi-3's "self_attn.qkv_proj.weight" [q + 2 kv, dim] by q_proj, k_proj,
//    v_proj, and "mlp.gate_up_proj.weight" [2 h, dim] by gate_proj (first h
//    rows) and up_proj. Phi-3 GGUF files call the fused gate/up "ffn_up",
//    which arrives here as "mlp.up_proj.weight" with 2 h rows.
//  - Mixtral's Hugging Face "block_sparse_moe.gate" / "experts.E.w1|w3|w2"
//    by "mlp.gate" / "mlp.experts.E.gate_proj|up_proj|down_proj".
//  - stacked experts [E, rows, cols] ("mlp.experts.gate_proj.weight" etc.,
//    GGUF's ffn_{gate,up,down}_exps; transformers 5's "mlp.experts.
//    gate_up_proj" [E, 2 h, dim] and "mlp.experts.down_proj") by one 2-D
//    view per expert: "mlp.experts.E.gate_proj.weight".
// Throws ModelFormatError (naming `path`) on a fused tensor whose shape does
// not split as the config says.
void CanonicalizeArchTensors(const ModelConfig& config, const std::string& path,
                             std::map<std::string, TensorInfo>& tensors);

// "model.layers.{layer}.mlp.experts.{expert}.{proj}.weight"
std::string ExpertTensorName(int layer, int expert, const std::string& proj);

}  // namespace specline
