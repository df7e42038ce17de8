#include "stage_worker/slice_factory.h"

#include "absl/strings/str_cat.h"
#include "model/runtime/stage_slice.h"
#ifdef SPECLINE_HAVE_CUDA
#include "model/cuda/cuda_stage_slice.h"
#endif

namespace specline {

absl::StatusOr<std::unique_ptr<SliceBackend>> MakeSlice(
    const ModelSource& src, int begin, int end, const SliceOptions& options,
    const DeviceConfig& device, int stage, std::shared_ptr<kernels::ThreadPool> pool) {
  if (!device.cuda) return std::make_unique<StageSlice>(src, begin, end, options, std::move(pool));
#ifdef SPECLINE_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("--device ", device.ToString(), ": no usable CUDA device on this machine"));
  }
  cuda::CudaSliceOptions o;
  o.slice = options;
  o.dtype = device.dtype;
  o.device = device.ordinal >= 0 ? device.ordinal : stage % count;
  o.cuda_graphs = device.cuda_graphs;
  if (o.device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("--device cuda:", o.device, ": only ", count,
                                                   " CUDA device(s) visible"));
  }
  try {
    return std::unique_ptr<SliceBackend>(new cuda::CudaStageSlice(src, begin, end, o));
  } catch (const cuda::CudaError& e) {
    return absl::ResourceExhaustedError(absl::StrCat("layers ", begin, ":", end, " on cuda:",
                                                     o.device, ": ", e.what()));
  }
#else
  return absl::UnimplementedError("this build has no CUDA backend");
#endif
}

}  // namespace specline
