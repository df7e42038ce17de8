// Deterministic randomly initialised Llama-family models in every supported
// format, for tests and benchmarks that need a model of a given shape.
//
// One *logical* model is defined per (config, seed): its tensors under
// canonical names in Hugging Face layout (q/k rows in rotate_half order),
// each drawn from its own stream seeded by (seed, name), so a tensor's values
// do not depend on which other tensors exist. Every format stores that same
// model: the llama2.c and GGUF "llama"/"mistral" writers reorder the q/k rows
// into the interleaved RoPE layout those formats use (see rope_layout.h), and
// the readers report the matching rope_style. A correct runtime therefore
// produces the same logits from all three files (up to the weight dtype's
// rounding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "model/formats/model_source.h"
#include "model/model_config.h"

namespace specline {

struct RandomTensor {
  std::string name;             // canonical name
  std::vector<int64_t> shape;   // PyTorch order
  std::vector<float> values;    // Hugging Face layout
};

// The logical model's tensors, in a fixed order. Scales keep activations of
// order one at any size (so errors in a runtime show in the logits): matrices
// uniform with std 1/sqrt(fan_in), embedding and lm_head std 2/sqrt(dim),
// norm weights 1 +- 0.1, biases +- 0.1. lm_head only when untied; q/k biases
// when qkv_bias; q/k norms when qk_norm.
std::vector<RandomTensor> RandomModelTensors(const ModelConfig& config,
                                             uint64_t seed);

// Writes the logical model to `path` (a file for kLlama2c and kGguf, a
// directory, created if needed, for kHuggingFace).
//  - kLlama2c: fp32 only; needs what the format can express (arch llama,
//    head_dim * n_heads == dim, theta 10000, eps 1e-5, no biases, q/k norms
//    or rope scaling).
//  - kGguf: matrices in `weight_dtype` (any DType; quantized ones need the
//    row length to be a multiple of 32, 256 for the K-quants), 1-D tensors in F32 as llama.cpp
//    does; Llama 3 scaling as a rope_freqs.weight tensor. Metadata is the
//    architecture keys, plus, when `vocab_from` names a GGUF file, its
//    tokenizer.* keys copied with their types (so llama.cpp, which refuses
//    a GGUF without a vocabulary, loads the model); its piece count must
//    equal config.vocab_size.
//  - kHuggingFace: config.json + model.safetensors, every tensor in
//    `weight_dtype` (F32, F16 or BF16).
// The config's rope_style is ignored (the format decides it). Throws
// std::invalid_argument for a config the format cannot hold or an invalid
// config, std::runtime_error on I/O errors.
void WriteRandomModel(const ModelConfig& config, ModelFormat format,
                      const std::string& path, uint64_t seed,
                      DType weight_dtype = DType::kF32,
                      const std::string& vocab_from = "");

// Writes any model (e.g. a Hugging Face directory) as GGUF: its canonical
// tensors decoded to fp32 and stored as WriteRandomModel's kGguf writer
// would (fused, stacked and q/k-reordered as the arch's GGUF files are),
// matrices in `weight_dtype`. For tests that check the GGUF path against
// goldens made from the Hugging Face files.
void WriteModelAsGguf(const ModelSource& src, const std::string& path,
                      DType weight_dtype = DType::kF32);

}  // namespace specline
