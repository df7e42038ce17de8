#include "model/runtime/device_config.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace specline {

std::string DeviceConfig::ToString() const {
  if (!cuda) return "cpu";
  return ordinal < 0 ? "cuda" : absl::StrCat("cuda:", ordinal);
}

absl::StatusOr<DeviceConfig> ParseDeviceSpec(const std::string& device, const std::string& dtype) {
  DeviceConfig spec;
  if (device == "cpu" || device.empty()) {
    spec.cuda = false;
  } else if (device == "cuda") {
    spec.cuda = true;
  } else if (device.rfind("cuda:", 0) == 0) {
    spec.cuda = true;
    const std::string n = device.substr(5);
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), spec.ordinal);
    if (n.empty() || ec != std::errc() || end != n.data() + n.size() || spec.ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device: \"", device, "\" is not cpu, cuda or cuda:N"));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: \"", device, "\" is not cpu, cuda or cuda:N"));
  }
  if (dtype == "bf16" || dtype.empty()) {
    spec.dtype = DType::kBF16;
  } else if (dtype == "f16" || dtype == "fp16") {
    spec.dtype = DType::kF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: \"", dtype, "\" is not bf16 or f16"));
  }
  if (spec.cuda && !BuiltWithCuda()) {
    return absl::UnimplementedError(absl::StrCat(
        "--device ", device, ": this build has no CUDA backend (no CUDA toolkit at build time)"));
  }
  return spec;
}

bool BuiltWithCuda() {
#ifdef SPECLINE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace specline
