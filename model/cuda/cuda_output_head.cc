#include "model/cuda/cuda_output_head.h"

#include <cmath>

#include "kernels/cuda/ops.h"

namespace specline::cuda {

CudaOutputHead::CudaOutputHead(const ModelSource& src, DType t, int device) : t_(t) {
  Init(device);
  const ModelConfig& c = src.config();
  eps_ = c.norm_eps;
  std::vector<float> norm(c.dim);
  const TensorInfo& nt = src.Require("model.norm.weight", {c.dim});
  kernels::DequantizeRow(nt.dtype, nt.data, c.dim, norm.data());
  norm_ = UploadFloats(norm);
  const TensorInfo* head = src.Find("lm_head.weight");
  const std::string name =
      head == nullptr || c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  lm_head_ = LoadMatrix(src, name, c.vocab_size, c.dim, t);
  final_softcap_ = c.final_softcap;
}

CudaOutputHead::CudaOutputHead(const ModelConfig& c, DType t, int device, uint64_t seed) : t_(t) {
  Init(device);
  eps_ = c.norm_eps;
  norm_.Resize(c.dim * sizeof(float));
  FillUniformF32(norm_.as<float>(), c.dim, seed ^ 0x40E, 0.9f, 1.1f, nullptr);
  lm_head_ = RandomMatrix(c.vocab_size, c.dim, t, seed ^ 0x1A4, 2.0f * std::sqrt(3.0f / c.dim));
  final_softcap_ = c.final_softcap;
}

void CudaOutputHead::Init(int device) {
  ElementBytes(t_);
  SPECLINE_CUDA_CHECK(cudaSetDevice(device));
  SPECLINE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<Gemm>(stream_);
}

CudaOutputHead::~CudaOutputHead() {
  gemm_.reset();
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

int64_t CudaOutputHead::weight_bytes() const {
  return lm_head_.view.rows * lm_head_.view.cols * ElementBytes(t_);
}

void CudaOutputHead::Reserve(int64_t n) {
  if (n <= capacity_) return;
  capacity_ = n;
  x_.Resize(n * dim() * sizeof(float));
  xb_.Resize(n * dim() * ElementBytes(t_));
  logits_.Resize(n * vocab_size() * sizeof(float));
  ids_.Resize(n * sizeof(int32_t));
}

const float* CudaOutputHead::Compute(const float* hidden, int64_t n, cudaMemcpyKind kind) {
  Reserve(n);
  // The norm works on a copy: AddRmsNorm owns its residual argument.
  SPECLINE_CUDA_CHECK(
      cudaMemcpyAsync(x_.get(), hidden, n * dim() * sizeof(float), kind, stream_));
  AddRmsNorm(t_, x_.as<float>(), nullptr, norm_.as<float>(), eps_, static_cast<int>(n), dim(),
             xb_.get(), stream_);
  gemm_->Run(lm_head_.view, xb_.get(), n, logits_.get(), /*y_f32=*/true);
  // Gemma 2: capped before argmax too, so ties fall as on the CPU head.
  SoftCapF32(logits_.as<float>(), n * vocab_size(), final_softcap_, stream_);
  return logits_.as<float>();
}

const float* CudaOutputHead::LogitsOnDevice(const float* device_hidden, int64_t n) {
  return Compute(device_hidden, n, cudaMemcpyDeviceToDevice);
}

const int32_t* CudaOutputHead::ArgmaxIds(const float* hidden, int64_t n, cudaMemcpyKind kind) {
  const float* logits = Compute(hidden, n, kind);
  ArgmaxRows(logits, static_cast<int>(n), vocab_size(), ids_.as<int32_t>(), stream_);
  return ids_.as<int32_t>();
}

const int32_t* CudaOutputHead::ArgmaxOnDevice(const float* device_hidden, int64_t n) {
  return ArgmaxIds(device_hidden, n, cudaMemcpyDeviceToDevice);
}

void CudaOutputHead::Logits(const float* hidden, int64_t n, float* logits) {
  if (n == 0) return;
  const float* d = Compute(hidden, n, cudaMemcpyHostToDevice);
  SPECLINE_CUDA_CHECK(cudaMemcpyAsync(logits, d, n * vocab_size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaOutputHead::Argmax(const float* hidden, int64_t n, int32_t* ids) {
  if (n == 0) return;
  const int32_t* d = ArgmaxIds(hidden, n, cudaMemcpyHostToDevice);
  SPECLINE_CUDA_CHECK(
      cudaMemcpyAsync(ids, d, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace specline::cuda
