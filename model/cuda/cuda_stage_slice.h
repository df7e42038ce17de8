// A stage slice on a GPU: layers [begin, end) with bf16/fp16 weights and a
// paged KV cache in device memory, driven through SliceBackend like the CPU
// StageSlice (same slot rules, same rollback semantics, same taps), so a
// stage worker runs either.
//
// One Forward = one micro-batch:
//   host: validate and reserve KV blocks (the shared ValidateAndReserve on
//         a bookkeeping-only PagedKvCache), then pack the batch's metadata
//         (tokens, physical KV rows, block tables, RoPE angles, attention
//         tiles) into one pinned buffer;
//   device, on the slice's own stream: one metadata copy, embedding or the
//         hidden input, the layers, then the output (and taps) back to
//         pinned memory; one synchronization at the end.
// Per layer: fused residual add + RMSNorm, one fused QKV GEMM, bias / q-k
// norm / RoPE, KV write, paged attention (decode rows split-K, prefill
// chunks tiled), the output projection, add + norm, one fused gate/up
// GEMM, SwiGLU, the down projection (added by the next layer's norm).
//
// Decode batches (every sequence one slot) replay a CUDA graph captured per
// batch-size bucket (1, 2, 4, ..., 64) and tap set: the launches of a whole
// stage cost one graph launch. Batches are padded up to the bucket with
// rows that read and write a reserved scratch KV block.
//
// A slice owns its stream, so several slices of one process (several
// stages sharing a GPU) run concurrently; ForwardDevice lets the next
// co-located stage take the output without a trip through the host.
//
// Driven by one thread at a time (like StageSlice).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "model/cuda/device_weights.h"
#include "model/formats/model_source.h"
#include "model/runtime/rope.h"
#include "model/runtime/slice_backend.h"

namespace specline::cuda {

struct CudaSliceOptions {
  SliceOptions slice;           // KV capacity and block size, hidden_input
  DType dtype = DType::kBF16;   // weights, activations and KV cache
  int device = 0;               // CUDA device ordinal
  bool cuda_graphs = true;      // replay decode batches from captured graphs
  int max_graph_batch = 64;     // largest bucket captured
};

class CudaStageSlice : public SliceBackend {
 public:
  // Weights of layers [begin, end) (and the embedding when begin == 0 and
  // not hidden_input) from `src`, converted to options.dtype. Throws
  // ModelFormatError on missing or mis-shaped tensors, CudaError when the
  // device cannot hold them.
  CudaStageSlice(const ModelSource& src, int begin, int end, const CudaSliceOptions& options);
  // Random weights of `config`'s shape (benchmarks of shapes no file holds).
  CudaStageSlice(const ModelConfig& config, int begin, int end, const CudaSliceOptions& options,
                 uint64_t seed);
  ~CudaStageSlice() override;

  int begin() const override { return begin_; }
  int end() const override { return end_; }
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cuda:" + std::to_string(options_.device); }

  absl::Status Forward(const SliceInput& in, std::span<const int> tap_indices,
                       SliceOutput* out) override;

  // As Forward, but device to device, for co-located stages: the input
  // hidden rows (slices other than the first; in.hidden is ignored) are read
  // from `device_in` (fp32 [n, dim]) once `in_ready` has fired (may be
  // null), and the output is written to `device_out` (fp32 [n, dim], the
  // caller's) with `out_ready` recorded after it (may be null). The host
  // waits for nothing but the taps, which still come back in `taps`.
  absl::Status ForwardDevice(const SliceInput& in, const float* device_in, cudaEvent_t in_ready,
                             std::span<const int> tap_indices, std::vector<Tap>* taps,
                             float* device_out, cudaEvent_t out_ready);

  void Truncate(uint64_t seq, int32_t length) override { kv_.Truncate(seq, length); }
  void Release(uint64_t seq) override { kv_.Release(seq); }
  int32_t Length(uint64_t seq) const override { return kv_.Length(seq); }
  const PagedKvCache& kv_cache() const override { return kv_; }
  PagedKvCache& mutable_kv_cache() override { return kv_; }

  cudaStream_t stream() const { return stream_; }
  // Bytes of weights one decode step reads (matrices, plus one embedding
  // row): the numerator of achieved bandwidth.
  int64_t decode_weight_bytes() const;
  int graphs_captured() const { return static_cast<int>(graphs_.size()); }
  Gemm& gemm() { return *gemm_; }

 private:
  struct Plan;  // one batch's metadata, host side
  struct MetaLayout;
  void Init();
  // Everything but the input and output copies: validation, reservation,
  // metadata upload, the layers (eager or graph), tap copies.
  absl::Status Prepare(const SliceInput& in, std::span<const int> tap_indices, bool device_input,
                       Plan& plan);
  void Launch(const Plan& plan, std::span<const int> tap_indices);
  // Runs `body` on this slice's device; a CudaError becomes INTERNAL.
  absl::Status Guarded(const std::function<absl::Status()>& body);
  // The input rows into x_ (and zeros into graph padding rows).
  void LoadHidden(const Plan& plan, const float* src, cudaMemcpyKind kind);
  void CopyTapsOut(const Plan& plan, std::span<const int> tap_indices, std::vector<Tap>* taps);
  void BuildPlan(const SliceInput& in, Plan& plan) const;
  void EnsureCapacity(int rows, int taps);
  void Enqueue(const Plan& plan, std::span<const int> tap_indices);
  void RunLayer(int local, const Plan& plan, bool add_delta);
  void Attention(int local, const Plan& plan);

  ModelConfig config_;
  int begin_, end_;
  CudaSliceOptions options_;
  bool embeds_;
  Rope rope_;
  // Gemma: the sliding-window layers' RoPE. When some layer of the slice
  // slides, the metadata carries a second set of angles after the first
  // (rope_copies_ == 2; AngleFloats() per row).
  Rope rope_local_{config_, /*local=*/true};
  int rope_copies_ = 1;
  int AngleFloats() const { return config_.head_dim / 2 * rope_copies_; }
  PagedKvCache kv_;  // bookkeeping only (0 layers): block ownership
  int kv_blocks_ = 0;
  int max_blocks_ = 0;  // block-table width: ceil(max_len / block_size)
  int max_len_ = 0;     // longest sequence the cache can hold

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  OwnedMatrix embedding_;
  std::vector<DeviceLayerWeights> layers_;
  std::vector<DeviceBuffer> k_cache_, v_cache_;  // per layer, kv_blocks_ + 1 blocks

  // Activations and metadata, grown to the largest batch seen.
  int capacity_rows_ = 0;
  int capacity_taps_ = 0;
  DeviceBuffer x_, xb_, qkv_, att_, delta_, gate_up_, h_, attn_ws_, taps_;
  DeviceBuffer meta_;      // device copy of the packed metadata
  PinnedBuffer meta_host_; // packed metadata, host side
  PinnedBuffer io_host_;   // hidden in/out and taps
  cudaEvent_t meta_uploaded_ = nullptr;  // the last metadata upload left meta_host_

  // Captured decode graphs by (bucket rows, tap set).
  std::map<std::pair<int, std::vector<int>>, cudaGraphExec_t> graphs_;

  // Mixture of experts (cuda_moe.cc): the MLP of MoE layers, routed on the
  // host, each picked expert's GEMMs over the rows that picked it.
  void RunMoe(int local, int rows);
  DeviceBuffer moe_logits_, moe_x_, moe_y_, moe_acc_, moe_meta_;
  PinnedBuffer moe_host_;
};

}  // namespace specline::cuda
