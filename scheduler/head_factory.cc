#include "scheduler/head_factory.h"

#include <stdexcept>

#ifdef SPECLINE_HAVE_CUDA
#include "kernels/cuda/device_buffer.h"
#include "model/cuda/cuda_output_head.h"
#endif

namespace specline::scheduler {

std::unique_ptr<LogitsHead> MakeLogitsHead(const ModelSource& model,
                                           std::shared_ptr<kernels::ThreadPool> pool,
                                           const DeviceConfig& device) {
  if (!device.cuda) return std::make_unique<OutputHead>(model, std::move(pool));
#ifdef SPECLINE_HAVE_CUDA
  std::string why;
  if (!cuda::DeviceAvailable(&why)) {
    throw std::runtime_error("--device " + device.ToString() + ": no usable CUDA device (" + why +
                             ")");
  }
  return std::make_unique<cuda::CudaOutputHead>(model, device.dtype,
                                                device.ordinal >= 0 ? device.ordinal : 0);
#else
  throw std::runtime_error("--device " + device.ToString() + ": this build has no CUDA backend");
#endif
}

}  // namespace specline::scheduler
