// Error handling for CUDA, cuBLAS and NCCL calls: every call's status is
// checked, and a failure becomes an exception naming the call and where it
// was made (the GPU runtime's constructors and Forward turn it into an
// absl::Status at the boundary).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace specline::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void ThrowCudaError(const char* what, const std::string& detail,
                                        const char* file, int line) {
  throw CudaError(std::string(what) + " failed: " + detail + " (" + file + ":" +
                  std::to_string(line) + ")");
}

}  // namespace specline::cuda

#define SPECLINE_CUDA_CHECK(call)                                                        \
  do {                                                                                   \
    const cudaError_t specline_err_ = (call);                                            \
    if (specline_err_ != cudaSuccess) {                                                  \
      ::specline::cuda::ThrowCudaError(#call, cudaGetErrorString(specline_err_), __FILE__, \
                                       __LINE__);                                        \
    }                                                                                    \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at
// the next synchronizing call.
#define SPECLINE_CUDA_CHECK_LAUNCH() SPECLINE_CUDA_CHECK(cudaGetLastError())
