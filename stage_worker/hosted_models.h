// What a stage process hosts besides its base weights: the adapters and
// weight sets named by --adapter / --weight-set, loaded and checked against
// the base model, with the ids slots use to ask for them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/formats/model_source.h"
#include "model/runtime/slice_adapter.h"
#include "specline/internal/stage.pb.h"

namespace specline {

// As GetInfo reports it.
struct HostedModels {
  std::vector<internal::WeightSetInfo> weight_sets;
  std::vector<internal::AdapterInfo> adapters;
};

struct LoadedAddOns {
  HostedModels info;
  std::vector<std::shared_ptr<const SliceAdapter>> adapters;  // id k at k - 1
  std::vector<std::unique_ptr<ModelSource>> weight_sets;      // id k at k - 1
};

// Loads each directory in order (ids 1, 2, ...). An error names the
// directory and what is wrong with it.
absl::StatusOr<LoadedAddOns> LoadAddOns(const std::vector<std::string>& adapter_dirs,
                                        const std::vector<std::string>& weight_set_dirs,
                                        const ModelConfig& base);

}  // namespace specline
