// The final RMSNorm and LM head on a GPU (the scheduler's half of the
// model, see OutputHead): hidden rows in, fp32 logits out, with the greedy
// argmax also available on the device so a greedy step can bring back ids
// instead of vocab-wide rows.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "model/cuda/device_weights.h"
#include "model/formats/model_source.h"
#include "model/runtime/output_head.h"

namespace specline::cuda {

class CudaOutputHead : public LogitsHead {
 public:
  // lm_head.weight, or the embedding for tied models, in `t`.
  CudaOutputHead(const ModelSource& src, DType t = DType::kBF16, int device = 0);
  // Random head of `config`'s shape (benchmarks).
  CudaOutputHead(const ModelConfig& config, DType t, int device, uint64_t seed);
  ~CudaOutputHead() override;

  int vocab_size() const override { return static_cast<int>(lm_head_.view.rows); }
  int dim() const override { return static_cast<int>(lm_head_.view.cols); }
  void Logits(const float* hidden, int64_t n, float* logits) override;
  using LogitsHead::Logits;

  // Greedy ids of n hidden rows (host in, host out), argmax on the device.
  void Argmax(const float* hidden, int64_t n, int32_t* ids) override;
  // Device-resident variants: hidden (fp32 [n, dim]) already on the device;
  // results stay there (logits fp32 [n, vocab], ids int32 [n]) until the
  // next call. Enqueued on stream(), not synchronized.
  const float* LogitsOnDevice(const float* device_hidden, int64_t n);
  const int32_t* ArgmaxOnDevice(const float* device_hidden, int64_t n);

  cudaStream_t stream() const { return stream_; }
  int64_t weight_bytes() const;

 private:
  void Init(int device);
  void Reserve(int64_t n);
  // Norm + LM head of n rows copied in from `hidden` (host or device).
  const float* Compute(const float* hidden, int64_t n, cudaMemcpyKind kind);
  const int32_t* ArgmaxIds(const float* hidden, int64_t n, cudaMemcpyKind kind);

  DType t_;
  float eps_ = 1e-5f;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  DeviceBuffer norm_;
  OwnedMatrix lm_head_;
  int64_t capacity_ = 0;
  DeviceBuffer x_, xb_, logits_, ids_;
  float final_softcap_ = 0.0f;  // Gemma 2's final-logit soft cap (0: none)
};

}  // namespace specline::cuda
