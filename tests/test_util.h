// Helpers shared by the tests: where golden files and shared models are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace specline::testing {

// Absolute path of a file in the repository, e.g. "tests/data/x.json".
std::string SourcePath(const std::string& relative);

// Absolute path under ../shared/models (or $SPECLINE_SHARED_MODELS), or ""
// when that folder is absent (tests then GTEST_SKIP with a message).
std::string SharedModelPath(const std::string& relative);

// The SmolLM2 GGUF fetched by scripts/setup.sh into the model cache, or "".
std::string SmolLm2Path();
// Gemma 3 270M (Q4_K_M GGUF) in the same cache, or "" (scripts/setup.sh fetches it).
std::string Gemma3Path();

// A fresh temporary directory, removed at process exit.
std::string TempDir();

std::string ReadFile(const std::string& path);

// A golden file of the repository, parsed once per process and kept (e.g.
// "training/tests/data/ptp_golden.json").
const nlohmann::json& GoldenJson(const std::string& relative);

// How far two runs' logits of the same positions are apart (rows of `vocab`
// logits each): top-1 agreement and KL(a || b) of their softmaxes, mean and
// max over the rows.
struct LogitRowsGap {
  double top1 = 0, kl_mean = 0, kl_max = 0;
};
LogitRowsGap CompareLogitRows(const std::vector<float>& a, const std::vector<float>& b,
                              int64_t vocab);

}  // namespace specline::testing
