// cuBLAS, loaded with dlopen() the first time a GEMM object is made, not
// linked. Why: libcublasLt carries ~94 KB of thread-local storage, and a
// library linked at start-up adds its TLS to every thread's stack. The
// Prometheus exposer's web server (civetweb) starts its threads with fixed
// 100 KB stacks, which then cannot hold the TLS: pthread_create fails and
// /metrics never comes up, in every process, GPU or not. Loaded later,
// cuBLAS's TLS is allocated on demand instead, and CPU-only processes never
// load it at all.
#pragma once

#include <cublas_v2.h>

namespace specline::cuda {

// The cuBLAS entry points the backend uses.
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_workspace)(cublasHandle_t, void*, size_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_string)(cublasStatus_t);
};

// Loads libcublas.so.<major> once (the loader's search path, then the
// toolkit directory found at build time). Throws CudaError naming what
// failed when it cannot.
const CublasApi& Cublas();

}  // namespace specline::cuda
