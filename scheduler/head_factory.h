// The scheduler's output head (final norm + LM head) on the device the
// --device flag names: OutputHead on the CPU, CudaOutputHead on a GPU.
#pragma once

#include <memory>

#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"
#include "model/runtime/device_config.h"
#include "model/runtime/output_head.h"

namespace specline::scheduler {

// Throws std::runtime_error when a GPU is asked for and cannot be used
// (the scheduler refuses to start: a deployment asked for it explicitly).
std::unique_ptr<LogitsHead> MakeLogitsHead(const ModelSource& model,
                                           std::shared_ptr<kernels::ThreadPool> pool,
                                           const DeviceConfig& device);

}  // namespace specline::scheduler
