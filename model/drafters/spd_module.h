// The SPD speculation module (the draft model of SPD) on the CPU.
//
// Per token row at depth d (how many of the n pipeline stages it has passed):
//   g      = FC(concat of base hidden states H^j, j in TapsForDepth(d))
//            (v11: fc.i over taps[0..i]; v10: fc.0 over H^0 or fc.d over
//            H^0, H^{l/2}, H^l with l = d*L/n; see docs/heads.md)
//   x      = L_s Llama decoder layers of g (own paged KV cache, RoPE at the
//            true position, causal over the sequence's earlier positions)
//   logits = lm_head(RMSNorm_base(x))  (the base's frozen final norm)
// H^0 is the base embedding of the row's token, computed here; every other
// H^j comes from the caller (the stages' taps).
//
// SPD reruns in-flight rows every cycle: a call on rows [F, newest] keeps the
// cache's positions before F and overwrites the rest (StageSlice's implicit
// rollback), so a row's K/V always come from its latest (deepest) features.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/head_file.h"
#include "model/formats/model_source.h"
#include "model/runtime/kv_cache.h"
#include "model/runtime/stage_slice.h"

namespace specline {

struct SpdModuleOptions {
  int kv_block_size = 16;
  int kv_capacity_tokens = 4096;
};

struct SpdRow {
  int32_t pos = 0;    // true position
  int32_t token = 0;  // token id at pos (for H^0)
  int depth = 0;      // stages passed, 0..n
  // The hidden states H^j for j in TapsForDepth(depth) excluding 0, in that
  // order, concatenated: (TapsForDepth(depth).size() - 1) * dim floats (may
  // be empty).
  std::span<const float> taps;
};

// Driven by one thread at a time (it reuses scratch buffers, like StageSlice).
class SpdModule {
 public:
  // `head` must be method kSpd (std::invalid_argument otherwise); `base` is
  // the base model (embedding + final norm are read from it; its shape must
  // be the head's base). Both are kept alive (their tensors are mapped).
  SpdModule(std::shared_ptr<const DraftHead> head, std::shared_ptr<const ModelSource> base,
            std::shared_ptr<kernels::ThreadPool> pool, const SpdModuleOptions& options = {});
  ~SpdModule();

  int n_stages() const { return head_->config().spd_stages; }
  int n_layers() const { return head_->config().spd_layers; }  // L_s
  int dim() const { return head_->base_config().dim; }
  int vocab_size() const { return head_->base_config().vocab_size; }

  // Tap indices (ascending, first is 0) a row at `depth` needs: v11
  // bounds[0..i]; v10 {0} or {0, l/2, l} deduplicated. Empty for a depth
  // outside [0, n].
  std::vector<int> TapsForDepth(int depth) const;
  // Every tap index any depth needs (ascending): what the scheduler must
  // request from the stages.
  std::vector<int> AllTaps() const { return all_taps_; }

  // Runs rows (consecutive positions of `seq`, first <= Length(seq), which
  // becomes the new length); writes the vocab logits of the LAST row into
  // last_logits. All-or-nothing: on a bad depth, taps size, token, empty
  // rows, a gap (InvalidArgument) or a full KV cache (ResourceExhausted) the
  // cache is unchanged.
  absl::Status Forward(uint64_t seq, std::span<const SpdRow> rows, float* last_logits);

  void Truncate(uint64_t seq, int32_t length) { layers_->Truncate(seq, length); }
  void Release(uint64_t seq) { layers_->Release(seq); }
  int32_t Length(uint64_t seq) const { return layers_->Length(seq); }
  const PagedKvCache& kv_cache() const { return layers_->kv_cache(); }

 private:
  // How the feature of a row at one depth is made: fc_[fc] over the
  // concatenation of H^j for j in `concat` (v10 may repeat an index, e.g.
  // H^0 twice when l/2 == 0: the FC expects 3 blocks regardless).
  struct Feature {
    int fc = 0;
    std::vector<int> concat;
    std::vector<int> taps;  // sorted unique `concat`: TapsForDepth
  };

  std::shared_ptr<const DraftHead> head_;
  std::shared_ptr<const ModelSource> base_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::vector<Feature> features_;  // by depth 0..n
  std::vector<int> all_taps_;
  kernels::WeightMatrix embedding_;  // the base's
  std::vector<float> norm_;          // the base's final norm
  float eps_ = 0;
  std::vector<kernels::WeightMatrix> fc_;
  kernels::WeightMatrix lm_head_;    // the head's
  std::unique_ptr<StageSlice> layers_;
  // Scratch reused across calls.
  std::vector<SlotRef> slots_;
  std::vector<float> cat_, features_in_, normed_;
  SliceOutput out_;
};

}  // namespace specline
