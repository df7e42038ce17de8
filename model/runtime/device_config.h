// Where a process computes: "cpu", or a CUDA device with the element type
// its weights and activations use there. Parsed from --device / --dtype by
// the stage worker, the scheduler and `specline serve`.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace specline {

struct DeviceConfig {
  bool cuda = false;
  // CUDA ordinal; -1 = pick: a stage takes (stage index % visible devices),
  // so `specline serve --device cuda` puts one stage per GPU.
  int ordinal = -1;
  DType dtype = DType::kBF16;  // GPU element type (bf16 or f16)
  bool cuda_graphs = true;

  std::string ToString() const;
};

// "cpu", "cuda" or "cuda:N"; dtype "bf16" | "f16". INVALID_ARGUMENT naming
// the flag otherwise.
absl::StatusOr<DeviceConfig> ParseDeviceSpec(const std::string& device, const std::string& dtype);

// Whether this binary was built with the CUDA backend.
bool BuiltWithCuda();

}  // namespace specline
