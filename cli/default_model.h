// Where `specline` finds a model when --model is not given.
#pragma once

#include <string>

namespace specline::cli {

// The model cache: $SPECLINE_MODEL_CACHE, else ~/.cache/specline/models
// (scripts/setup.sh fetches SmolLM2 there).
std::string ModelCacheDir();

// $SPECLINE_MODEL; else SmolLM2-135M-Instruct in the model cache; else
// stories260K from ../shared/models. "" when none exists.
std::string DefaultModelPath();

}  // namespace specline::cli
