// Builds a stage's slice on the device its flags name: the CPU StageSlice,
// or a CudaStageSlice when built with CUDA and asked for.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"
#include "model/runtime/device_config.h"
#include "model/runtime/slice_backend.h"

namespace specline {

// `stage` resolves DeviceConfig::ordinal == -1 (stage % visible GPUs).
// UNAVAILABLE when CUDA is asked for and no device is usable; model errors
// come as ModelFormatError, like StageSlice's.
absl::StatusOr<std::unique_ptr<SliceBackend>> MakeSlice(
    const ModelSource& src, int begin, int end, const SliceOptions& options,
    const DeviceConfig& device, int stage, std::shared_ptr<kernels::ThreadPool> pool);

}  // namespace specline
