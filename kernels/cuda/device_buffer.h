// Owning device and pinned-host allocations (RAII over cudaMalloc /
// cudaMallocHost). Plain allocations only: managed memory is never used.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace specline::cuda {

// One owning allocation; Memory says how to allocate and free it.
template <typename Memory>
class OwnedAllocation {
 public:
  OwnedAllocation() = default;
  explicit OwnedAllocation(size_t bytes) { Resize(bytes); }
  ~OwnedAllocation() { Free(); }
  OwnedAllocation(OwnedAllocation&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  OwnedAllocation& operator=(OwnedAllocation&& o) noexcept {
    if (this != &o) {
      Free();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  OwnedAllocation(const OwnedAllocation&) = delete;
  OwnedAllocation& operator=(const OwnedAllocation&) = delete;

  // Reallocates (contents lost) when `bytes` exceeds the current size.
  void Resize(size_t bytes) {
    if (bytes <= bytes_) return;
    Free();
    SPECLINE_CUDA_CHECK(Memory::Allocate(&ptr_, bytes));
    bytes_ = bytes;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void Free() {
    if (ptr_) Memory::Release(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct DeviceMemory {
  static cudaError_t Allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static void Release(void* p) { cudaFree(p); }
};
struct PinnedHostMemory {
  static cudaError_t Allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static void Release(void* p) { cudaFreeHost(p); }
};

using DeviceBuffer = OwnedAllocation<DeviceMemory>;  // device memory
using PinnedBuffer = OwnedAllocation<PinnedHostMemory>;  // page-locked host memory

// Whether a CUDA device can be used here (false on machines without a GPU
// or driver: tests skip, the CLI refuses --device cuda with this reason).
inline bool DeviceAvailable(std::string* why = nullptr) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return true;
}

}  // namespace specline::cuda
