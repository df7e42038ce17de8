// The model and prompts of the serving benchmarks (serving_bench,
// spec_bench): a random fp32 model of stories110M's shape, written once and
// reused, and deterministic token prompts. Random weights decode as fast as
// trained ones, and need no download.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/formats/random_model.h"
#include "model/model_config.h"

namespace specline::bench {

inline std::string EnsureStories110MShapedModel(const std::string& path) {
  if (std::filesystem::exists(path)) return path;
  const ModelConfig c = Stories110MShape();
  std::fprintf(stderr, "writing random stories110M-shaped model to %s\n", path.c_str());
  const std::string tmp = path + ".part";
  WriteRandomModel(c, ModelFormat::kLlama2c, tmp, /*seed=*/110);
  std::filesystem::rename(tmp, path);
  return path;
}

// A random model of a named Llama shape for GPU runs (tinyllama: 1.1B,
// llama2-7b, stories110m), as a Hugging Face directory of bf16 tensors in
// /tmp, written on first use.
inline std::string EnsureShapedModel(const std::string& shape) {
  ModelConfig c;
  if (shape == "tinyllama") c = LlamaShape(2048, 5632, 22, 32, 4, 32000, 2048);
  else if (shape == "llama2-7b") c = LlamaShape(4096, 11008, 32, 32, 32, 32000, 2048);
  else if (shape == "stories110m") c = Stories110MShape();
  else throw std::invalid_argument("unknown --shape " + shape);
  const std::string path = "/tmp/specline-random-" + shape + "-bf16";
  if (std::filesystem::exists(path + "/config.json")) return path;
  std::fprintf(stderr, "writing random %s-shaped bf16 model to %s\n", shape.c_str(), path.c_str());
  WriteRandomModel(c, ModelFormat::kHuggingFace, path, /*seed=*/1100, DType::kBF16);
  return path;
}

// n token ids spread over the vocabulary (valid for any vocab > 31000).
inline std::vector<int32_t> SyntheticPrompt(int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 1 + (i * 7919) % 31000;
  return p;
}

}  // namespace specline::bench
