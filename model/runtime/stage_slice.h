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
#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"
#include "model/runtime/kv_cache.h"
#include "model/runtime/rope.h"
#include "model/runtime/weights.h"

namespace specline {

struct SlotRef {
  uint64_t seq_id = 0;
  int32_t pos = 0;
};

struct SliceInput {
  std::span<const SlotRef> slots;
  std::span<const int32_t> tokens;  // first slice: one id per slot
  std::span<const float> hidden;    // other slices: slots.size() * dim
};

// Hidden states at one global layer boundary (Hugging Face numbering: 0 is
// the embedding output, k the output of layer k-1, before any final norm).
struct Tap {
  int index = 0;
  std::vector<float> hidden;  // slots.size() * dim
};

struct SliceOutput {
  std::vector<float> hidden;  // slots.size() * dim: output of layer end-1
  std::vector<Tap> taps;      // in the order requested
};

struct SliceOptions {
  int kv_block_size = 16;
  // KV capacity of this slice in token positions (summed over sequences).
  int kv_capacity_tokens = 4096;
  // A slice with begin == 0 normally embeds token ids. With hidden_input it
  // takes hidden rows like any other slice and maps no embedding: for
  // modules whose layer 0 reads computed features, not tokens (SPD's
  // speculation module, whose source has no embedding of its own).
  bool hidden_input = false;
};

class StageSlice {
 public:
  // Maps only the tensors of layers [begin, end) (and the embedding when
  // begin == 0). Throws ModelFormatError on missing or mis-shaped tensors.
  StageSlice(const ModelSource& src, int begin, int end, const SliceOptions& options,
             std::shared_ptr<kernels::ThreadPool> pool);

  int begin() const { return begin_; }
  int end() const { return end_; }
  const ModelConfig& config() const { return config_; }
  // Tap indices this slice can produce: [begin, end].
  bool CanTap(int index) const { return index >= begin_ && index <= end_; }

  // Runs the micro-batch. Per sequence, its slots' positions must be
  // consecutive in slot order and the first must not exceed the cached
  // length; that position becomes the new length (positions after it are
  // dropped: this is the implicit rollback). The call is all-or-nothing: on
  // any error (bad token, gap, KV cache full) no cache is changed.
  absl::Status Forward(const SliceInput& in, std::span<const int> tap_indices,
                       SliceOutput* out);

  // Explicit rollback: keep positions [0, length) of `seq`.
  void Truncate(uint64_t seq, int32_t length) { kv_.Truncate(seq, length); }
  void Release(uint64_t seq) { kv_.Release(seq); }
  int32_t Length(uint64_t seq) const { return kv_.Length(seq); }
  const PagedKvCache& kv_cache() const { return kv_; }

 private:
  absl::Status ValidateAndReserve(const SliceInput& in);
  void Embed(std::span<const int32_t> tokens, float* out) const;
  void RunLayer(int local, std::span<const SlotRef> slots, float* x);
  void Attention(int local, std::span<const SlotRef> slots, const float* q, float* out);

  ModelConfig config_;
  int begin_, end_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  bool embeds_;                        // begin == 0 and not options.hidden_input
  kernels::WeightMatrix embedding_{};  // valid when embeds_
  std::vector<LayerWeights> layers_;
  PagedKvCache kv_;
  Rope rope_;
  // Scratch reused across calls (a slice is driven by one thread at a time).
  std::vector<float> xb_, q_, k_, v_, att_, hb_, hb2_, cos_, sin_;
};

}  // namespace specline
