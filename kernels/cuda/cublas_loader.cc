#include "kernels/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <string>

#include "kernels/cuda/cuda_check.h"

namespace specline::cuda {
namespace {

void* OpenLibrary() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string errors;
  for (const std::string& path : {name,
#ifdef SPECLINE_CUDA_LIBRARY_DIR
                                  std::string(SPECLINE_CUDA_LIBRARY_DIR) + "/" + name,
#endif
                                  std::string("libcublas.so")}) {
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    errors += std::string(dlerror()) + "; ";
  }
  throw CudaError("cannot load cuBLAS (" + errors +
                  "put the CUDA toolkit's lib64 directory on LD_LIBRARY_PATH)");
}

template <typename Fn>
void Bind(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (fn == nullptr) throw CudaError(std::string("cuBLAS has no ") + symbol);
}

CublasApi Load() {
  void* lib = OpenLibrary();  // kept for the life of the process
  CublasApi api{};
  Bind(lib, "cublasCreate_v2", api.create);
  Bind(lib, "cublasDestroy_v2", api.destroy);
  Bind(lib, "cublasSetStream_v2", api.set_stream);
  Bind(lib, "cublasSetWorkspace_v2", api.set_workspace);
  Bind(lib, "cublasSetMathMode", api.set_math_mode);
  Bind(lib, "cublasGemmEx", api.gemm_ex);
  Bind(lib, "cublasGetStatusString", api.status_string);
  return api;
}

}  // namespace

const CublasApi& Cublas() {
  static const CublasApi api = Load();  // thread-safe once; a failure retries next call
  return api;
}

}  // namespace specline::cuda
