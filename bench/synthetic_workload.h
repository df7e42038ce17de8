// The model and prompts of the serving benchmarks (serving_bench,
// spec_bench): a random fp32 model of stories110M's shape, written once and
// reused, and deterministic token prompts. Random weights decode as fast as
// trained ones, and need no download.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
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

// n token ids spread over the vocabulary (valid for any vocab > 31000).
inline std::vector<int32_t> SyntheticPrompt(int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 1 + (i * 7919) % 31000;
  return p;
}

}  // namespace specline::bench
