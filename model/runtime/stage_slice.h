// A contiguous range of decoder layers [begin, end) with its own paged KV
// cache: the unit a pipeline stage runs. The first slice (begin == 0) also
// embeds token ids (unless SliceOptions::hidden_input). The final norm and
// LM head are not part of any slice (see OutputHead): the scheduler owns them.
//
// One Forward call runs a micro-batch of slots that may mix decode tokens of
// many sequences with prefill chunks: each slot is (sequence, position) plus
// its input (a token id on the first slice, a hidden row on the others).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"
#include "model/runtime/kv_cache.h"
#include "model/runtime/moe_mlp.h"
#include "model/runtime/rope.h"
#include "model/runtime/slice_backend.h"
#include "model/runtime/weights.h"

namespace specline {

class StageSlice : public SliceBackend {
 public:
  // Maps only the tensors of layers [begin, end) (and the embedding when
  // begin == 0). Throws ModelFormatError on missing or mis-shaped tensors.
  StageSlice(const ModelSource& src, int begin, int end, const SliceOptions& options,
             std::shared_ptr<kernels::ThreadPool> pool);

  int begin() const override { return begin_; }
  int end() const override { return end_; }
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cpu"; }

  absl::Status Forward(const SliceInput& in, std::span<const int> tap_indices,
                       SliceOutput* out) override;

  void Truncate(uint64_t seq, int32_t length) override { kv_.Truncate(seq, length); }
  void Release(uint64_t seq) override { kv_.Release(seq); }
  int32_t Length(uint64_t seq) const override { return kv_.Length(seq); }
  const PagedKvCache& kv_cache() const override { return kv_; }
  PagedKvCache& mutable_kv_cache() override { return kv_; }

 private:
  void Embed(std::span<const int32_t> tokens, float* out) const;
  void RunLayer(int local, std::span<const SlotRef> slots, float* x);
  // The adapter hook after base projection `target`: adds each adapter's
  // term at the rows it modifies (nothing when no slot asks for one).
  void Adapt(int local, Projection target, const float* x, int64_t x_width, float* y,
             int64_t y_width);
  void Attention(int local, std::span<const SlotRef> slots, const float* q, float* out);
  // Gemma's post-norm of the n rows of xb_ in place (nothing when empty).
  void PostNorm(const std::vector<float>& weight, int64_t n);
  // fn(i) for every row i in [0, n): over the pool for a prefill-sized n (the
  // per-row steps, RMSNorm, RoPE and the KV write, SwiGLU, are independent
  // per row, so the split changes no result), inline for decode-sized ones.
  template <typename Fn>
  void ForEachRow(int64_t n, const Fn& fn);
  static constexpr int64_t kParallelRows = 32;

  ModelConfig config_;
  int begin_, end_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  bool embeds_;                        // begin == 0 and not options.hidden_input
  std::vector<std::shared_ptr<const SliceAdapter>> adapters_;
  AdaptedRows adapted_rows_;  // of the batch being run
  kernels::WeightMatrix embedding_{};  // valid when embeds_
  std::vector<LayerWeights> layers_;
  PagedKvCache kv_;
  Rope rope_;
  // Scratch reused across calls (a slice is driven by one thread at a time).
  std::vector<float> xb_, q_, k_, v_, att_, hb_, hb2_, cos_, sin_;
  std::vector<kernels::AttentionRow> attn_rows_;
  // Gemma: the sliding-window layers' RoPE (its own base) and its angles.
  Rope rope_local_;
  bool has_local_rope_ = false;  // some layer of this slice slides
  std::vector<float> cos_local_, sin_local_;
  MoeMlp moe_;  // MoE models' MLP and its scratch
  std::vector<float> moe_out_;
};

}  // namespace specline
