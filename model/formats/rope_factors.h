// Llama 3.1 RoPE frequency scaling expressed as per-frequency divisors, the
// form GGUF files carry it in (llama.cpp's converter writes them as the
// "rope_freqs.weight" tensor instead of metadata keys).
#pragma once

#include <optional>
#include <vector>

#include "model/model_config.h"

namespace specline {

// Divisor of each of the head_dim/2 RoPE frequencies theta^(-2i/head_dim):
// 1 for short wavelengths, `factor` for long ones, a smooth blend between.
std::vector<float> Llama3RopeFactors(const Llama3RopeScaling& s, float theta,
                                     int head_dim);

// Recovers scaling parameters that reproduce `factors` (within 1e-4
// relative) given the original context length, or nullopt when no llama3
// scaling does. All-ones factors give factor 1 (no scaling).
std::optional<Llama3RopeScaling> FitLlama3RopeScaling(
    const std::vector<float>& factors, float theta, int head_dim,
    int original_max_position);

}  // namespace specline
