// What a head directory adds to a pipeline stage, as the stage sees it: an
// adapter (a change to the base weights' forward pass for the slots tagged
// with it) or a weight set (other weights for the same layers, which tagged
// slots run on with their own KV cache). The head file decides which; the
// stage worker only hosts them under ids and never names a method
// (docs/architecture.md, "Weight sets and adapters").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/formats/model_source.h"
#include "model/model_config.h"
#include "model/runtime/slice_adapter.h"

namespace specline {

struct StageAdapter {
  std::string kind;  // the head's method, for StageInfo and logs
  std::shared_ptr<const SliceAdapter> adapter;
};

struct StageWeightSet {
  std::string kind;
  uint64_t fingerprint = 0;  // of the head that brought the weights
  std::unique_ptr<ModelSource> weights;
  // The first slice of these weights takes hidden rows, not token ids.
  bool hidden_input = false;
};

// Loads `dir` and checks it against the base model `base`. An error says
// what is wrong (not a head, made for another model, a head of the other
// kind).
absl::StatusOr<StageAdapter> LoadStageAdapter(const std::string& dir, const ModelConfig& base);
absl::StatusOr<StageWeightSet> LoadStageWeightSet(const std::string& dir, const ModelConfig& base);

}  // namespace specline
